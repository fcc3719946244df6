import Synchronization

// Commands: from report answers and from the command stream (docs/commands.md), through the
// ledger (acted on once) to the platform's actions and the answers in the queue.

extension FindMyClient {
    /// A command seen in a report answer or on the stream.
    func received(_ command: ClientCommand, via channel: String) {
        perform(ledger { $0.received(command) }, seen: "\(command.kind) \(command.commandID) (\(channel))")
    }

    /// Changes the ledger, saves it (before acting: a crash then acts on nothing twice) and returns
    /// the actions.
    func ledger(_ change: (inout CommandLedger) -> [CommandAction]) -> [CommandAction] {
        var actions: [CommandAction] = []
        do {
            try updateState { actions = change(&$0.commands) }
        } catch {
            log("command state not saved: \(error)")
        }
        return actions
    }

    func perform(_ actions: [CommandAction], seen: String) {
        if !actions.isEmpty { log("command \(seen)") }
        for action in actions {
            switch action {
            case .startSound(let id):
                startSound(id)
            case .stopSound:
                self.actions?.stopSound()
                log("sound stopped")
            case .showLost(let id, let message, let phone):
                self.actions?.showLost(commandID: id, message: message, phone: phone)
                log("showing lost for \(id)")
            case .clearLost:
                self.actions?.clearLost()
                log("lost cleared")
            case .answerWithNewestFix(let id):
                if let line = queue.newestFixLine {
                    answer(id, line: line)
                } else {
                    answerWithFreshFix(id)
                }
            case .answerWithFreshFix(let id):
                answerWithFreshFix(id)
            }
        }
    }

    private func startSound(_ id: String) {
        actions?.startSound(commandID: id, limitSeconds: configuration.soundLimitSeconds)
        log("sound started for \(id), at most \(Int(configuration.soundLimitSeconds)) s")
    }

    private func answer(_ id: String, line: String) {
        do {
            try queue.appendReply(fixLine: line, inReplyTo: id)
            senderBell.ring()
        } catch {
            log("the answer to \(id) could not be queued: \(error)")
        }
    }

    /// A locate: a fix taken after now, sent in a batch of its own; none within the timeout, no answer.
    private func answerWithFreshFix(_ id: String) {
        guard let source = fixSource.withLock({ $0 }) else {
            log("no fix source to answer \(id)")
            return
        }
        let timeout = configuration.locateTimeoutSeconds
        Task {
            guard var fix = await source.freshFix(timeoutSeconds: timeout) else {
                self.log("no fresh fix within \(Int(timeout)) s: \(id) not answered")
                return
            }
            fix.source = "ondemand"
            if fix.batteryPercent == nil, let battery = self.battery?.current() {
                fix.batteryPercent = battery.percent
                fix.isCharging = battery.isCharging
            }
            guard let line = FixQueue.line(fix) else { return }
            self.answer(id, line: line)
        }
    }
}
