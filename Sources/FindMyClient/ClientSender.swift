// The queue's sender: sealed batches go out one at a time, replies first, each removed only after
// the server's 2xx (FixQueue's rules). What each answer means:
//
// | answer                              | the batch              | then                             |
// | ----------------------------------- | ---------------------- | -------------------------------- |
// | 200 / 201                           | removed                | rejected fixes logged, commands  |
// | 409 reporting_paused                | kept                   | paused here too, sending stops   |
// | 409 batch_in_progress, 429, 503     | kept                   | wait Retry-After (else back off) |
// | 400, 413 (the batch itself is bad)  | set aside (.refused)   | next batch at once               |
// | 401                                 | kept                   | back off (enrol again to fix)    |
// | anything else                       | kept                   | back off with jitter             |
// | no answer (no connection)           | kept                   | back off, at most 4 s by default |
//
// A wait after a failure is held: new fixes do not end it (a device recording offline would
// otherwise knock on the server for every fix); the stream connecting, `networkChanged()` or new
// credentials do (`reachability`).

extension FindMyClient {
    enum SendOutcome: Equatable {
        case stored
        case setAside
        case paused
        case retry(afterSeconds: Double?)
        /// No answer at all: the server or the network is away.
        case unreachable
    }

    func runSender() async {
        var failures = 0
        while !Task.isCancelled {
            do {
                guard currentCredentials?.deviceToken != nil, !isPaused else {
                    await senderBell.wait(untilMicros: nil)
                    continue
                }
                let due = try queue.sealIfDue()
                guard let batch = try queue.nextBatch() else {
                    await senderBell.wait(untilMicros: due)
                    continue
                }
                switch await send(batch) {
                case .stored, .setAside:
                    failures = 0
                case .paused:
                    failures = 0
                case .retry(let seconds):
                    let wait = seconds ?? backoffSeconds(failures: failures)
                    failures += 1
                    await holdOff(seconds: wait)
                case .unreachable:
                    let wait = backoffSeconds(failures: failures, reachedServer: false)
                    failures += 1
                    await holdOff(seconds: wait)
                }
            } catch {
                log("queue: \(error)")
                failures += 1
                await holdOff(seconds: backoffSeconds(failures: failures))
            }
        }
    }

    /// Waits `seconds`, or less if the server may have become reachable meanwhile (`reachability`);
    /// rings for new fixes do not shorten it.
    func holdOff(seconds: Double) async {
        let deadline = ClientClock.nowMicros() + Int64(seconds * 1_000_000)
        let seen = reachability.load(ordering: .acquiring)
        while !Task.isCancelled, ClientClock.nowMicros() < deadline,
            reachability.load(ordering: .acquiring) == seen
        {
            await senderBell.wait(untilMicros: deadline)
        }
    }

    /// Sends one batch and does what its answer says (the table above).
    func send(_ batch: QueuedBatch) async -> SendOutcome {
        let response: ClientResponse
        do {
            response = try await transport.send(
                try deviceRequest("POST", "/api/find-my/report", body: batch.reportBody))
        } catch {
            log("batch \(batch.batchID) not sent (\(batch.fixLines.count) fixes kept): \(error)")
            return .unreachable
        }
        switch response.status {
        case 200, 201:
            return stored(batch, response)
        case 400, 413:
            let error = ClientError.from(response)
            do { try queue.setAside(batch) } catch { return .retry(afterSeconds: nil) }
            log("batch \(batch.batchID) refused as a whole, set aside as \(batch.fileName): \(error)")
            return .setAside
        case 409 where ErrorAnswer.parse(response.body)?.code == "reporting_paused":
            try? updateState { $0.paused = true }
            log("the server says reporting is paused: \(batch.fixLines.count) fixes kept until it is resumed")
            return .paused
        case 409, 429, 503:
            log("batch \(batch.batchID) to be sent again: \(ClientError.from(response))")
            return .retry(afterSeconds: response.retryAfterSeconds)
        default:
            log("batch \(batch.batchID) to be sent again: \(ClientError.from(response))")
            return .retry(afterSeconds: nil)
        }
    }

    private func stored(_ batch: QueuedBatch, _ response: ClientResponse) -> SendOutcome {
        let answer = try? ReportAnswer(response.body)
        do {
            try queue.remove(batch)
        } catch {
            // Sent again later, the server answers it as a duplicate: nothing twice.
            log("batch \(batch.batchID) stored but not removed here: \(error)")
            return .retry(afterSeconds: nil)
        }
        guard let answer else {
            log("batch \(batch.batchID) stored; its answer could not be read")
            return .stored
        }
        for rejection in answer.rejected {
            log(
                "fix \(rejection.index) of batch \(batch.batchID) rejected by the server, dropped: \(rejection.reason)"
            )
        }
        let replying = batch.inReplyTo.map { " in reply to \($0)" } ?? ""
        log(
            "batch \(batch.batchID) \(answer.duplicate ? "was already stored" : "stored"): \(answer.accepted) of "
                + "\(batch.fixLines.count) fixes accepted\(replying)")
        for command in answer.commands { received(command, via: "report answer") }
        return .stored
    }
}
