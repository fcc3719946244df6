import Events

/// What a batch of fixes answers (docs/commands.md, "Channels without push").
public enum CommandAnswerTarget: Sendable, Equatable {
    /// A native report's `in_reply_to`: this command, if it is open for the reporting device.
    case command(UUID128)
    /// An OwnTracks location with `t: "r"` (a reportLocation answer): the device's oldest open locate.
    case oldestLocate
}

/// Every kind: the default of `commandsForAnswer`, built once rather than on every report.
private let everyCommandKind = Set(CommandKindCode.allCases)

extension RegistryStore {
    /// The device's open commands, oldest first, for a report's answer (`channel`: `report-answer`
    /// for the native report, `owntracks-http` for OwnTracks). The first time a command goes out
    /// through `channel`, `command_sent` is appended for it, without waiting: the answer does not
    /// depend on it, and a failed append only leaves the hand-out unrecorded.
    /// `kinds`: the kinds the channel can carry (OwnTracks knows only locate's `reportLocation`).
    package func commandsForAnswer(
        deviceID: UInt64, channel: String, excluding: UUID128? = nil,
        kinds: Set<CommandKindCode> = everyCommandKind
    ) -> [CommandBook.Open] {
        // Every report asks; almost always there is nothing open: a read lock, no write.
        let now = clockMicros()
        let open = registry.read { state in
            // A command of a user who may no longer command the device (a share ended) is not handed
            // out, in the second before the command worker expires it.
            state.registry.commands.open(deviceID: deviceID).filter {
                $0.request.commandID != excluding && kinds.contains($0.request.kind)
                    && state.registry.mayCommand(deviceID, user: $0.request.requestedByUserID, atMicros: now)
            }
        }
        guard open.contains(where: { !$0.sentChannels.contains(channel) }) else { return open }
        let newlyHanded = registry.write { state -> [CommandBook.Open] in
            var fresh: [CommandBook.Open] = []
            for command in open where !command.sentChannels.contains(channel) {
                let key = HandOutKey(commandID: command.request.commandID, channel: channel)
                if state.commandsHandedOut.insert(key).inserted { fresh.append(command) }
            }
            return fresh
        }
        for command in newlyHanded {
            let event = Event.commandSent(
                CommandSent(commandID: command.request.commandID, deviceID: deviceID, channel: channel))
            let key = HandOutKey(commandID: command.request.commandID, channel: channel)
            append(EventCodec.encode(event, receivedAtMicros: clockMicros())) { [self] result in
                registry.write { state in
                    if case .success(let offset) = result { state.registry.apply(event, offset: offset) }
                    state.commandsHandedOut.remove(key)
                }
            }
        }
        return open
    }

    /// Marks the command `target` names answered by the newest of `fixes` (the batch stored at
    /// `batchOffset`), appending `command_answered` without waiting. Nothing when the batch has no
    /// fix or the command is not open for this device: a late or foreign `in_reply_to` is ignored,
    /// the fixes are stored all the same.
    package func answerCommand(
        _ target: CommandAnswerTarget, deviceID: UInt64, batchOffset: UInt64, fixes: [Fix],
        clientProtocol: ClientProtocol
    ) {
        guard let newest = Self.newestFixIndex(fixes) else { return }
        let commandID = registry.read { state -> UUID128? in
            let book = state.registry.commands
            switch target {
            case .command(let id):
                return book.open[id]?.request.deviceID == deviceID ? id : nil
            case .oldestLocate:
                return book.open(deviceID: deviceID).first { $0.request.kind == .locate }?.request.commandID
            }
        }
        guard let commandID else { return }
        let event = Event.commandAnswered(
            CommandAnswered(
                commandID: commandID, deviceID: deviceID, batchOffset: batchOffset, fixIndex: UInt32(newest),
                clientProtocol: clientProtocol))
        // Two nodes given the same message (OwnTracks over MQTT reaches every subscribed node) answer
        // the same command: one Msg-Id, one record.
        append(
            EventCodec.encode(event, receivedAtMicros: clockMicros()),
            messageID: SharedRegistry.endMessageID(event)
        ) { [self] result in
            if case .success(let offset) = result {
                registry.write { $0.registry.apply(event, offset: offset) }
                notes(.commandAnswered(deviceID: deviceID, commandID: commandID))
            }
        }
    }

    /// The index of the batch's newest fix by its device time, a sound clock before a suspect one.
    static func newestFixIndex(_ fixes: [Fix]) -> Int? {
        fixes.indices.max { a, b in
            (fixes[a].clockSuspect ? 0 : 1, fixes[a].recordedAtMicros)
                < (fixes[b].clockSuspect ? 0 : 1, fixes[b].recordedAtMicros)
        }
    }
}

package struct HandOutKey: Hashable, Sendable {
    package var commandID: UUID128
    package var channel: String
}
