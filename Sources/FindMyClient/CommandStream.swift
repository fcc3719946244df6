import Synchronization

// The command stream (`GET /api/find-my/device/commands/stream`, Server-Sent Events): held open
// while the device runs, resumed with `Last-Event-ID` after any break. Its events go through the
// ledger like report answers' commands.
//
// | how the connection ended          | reconnect after                                      |
// | --------------------------------- | ---------------------------------------------------- |
// | 200, then closed or cut           | the stream's `retry` (5 s by default), jittered        |
// | 503 / 429 with Retry-After        | Retry-After                                          |
// | 401, 404 (a server without it)    | the back-off's maximum: report answers still carry commands |
// | anything else                     | back off with jitter                                 |
// | no connection                     | back off, at most `unreachableRetrySecondsMax`       |

extension FindMyClient {
    func runCommandStream() async {
        var failures = 0
        while !Task.isCancelled {
            guard currentCredentials?.deviceToken != nil else {
                await streamBell.wait(untilMicros: nil)
                continue
            }
            let wait: Double
            switch await holdStream() {
            case .ended(let retryMillis):
                failures = 0
                wait = Double(retryMillis) / 1000 * Double.random(in: 0.8..<1.2)
            case .refused(let status, let retryAfter):
                failures += 1
                wait =
                    retryAfter
                    ?? (status == 401 || status == 404
                        ? configuration.backoffSecondsMax : backoffSeconds(failures: failures))
            case .failed:
                failures += 1
                wait = backoffSeconds(failures: failures, reachedServer: false)
            }
            await streamBell.wait(untilMicros: ClientClock.nowMicros() + Int64(wait * 1_000_000))
        }
    }

    enum StreamEnd {
        case ended(retryMillis: Int)
        case refused(status: Int, retryAfter: Double?)
        case failed
    }

    private final class StreamState: Sendable {
        struct Fields {
            var parser = SSEParser()
            var head: ClientResponse?
            var errorBody: [UInt8] = []
        }
        let fields = Mutex(Fields())
    }

    /// One connection of the stream, until it ends.
    func holdStream() async -> StreamEnd {
        var request: ClientRequest
        do {
            request = try deviceRequest("GET", "/api/find-my/device/commands/stream")
        } catch {
            return .failed
        }
        request.headers.append(ClientHeader("Accept", "text/event-stream"))
        if let last = state.withLock({ $0.commands.lastEventID }) {
            request.headers.append(ClientHeader("Last-Event-ID", last))
        }
        let stream = StreamState()
        do {
            try await transport.stream(
                request,
                onHead: { head in
                    stream.fields.withLock { $0.head = head }
                    if head.status == 200 {
                        self.log("command stream connected")
                        // The server is reachable again: the sender need not wait out its back-off.
                        self.reachability.add(1, ordering: .releasing)
                        self.senderBell.ring()
                    }
                },
                onBytes: { bytes in self.streamBytes(bytes, stream) })
        } catch {
            let connected = stream.fields.withLock { $0.head?.status == 200 }
            log("command stream \(connected ? "broken" : "not connected"): \(error)")
            if connected {
                return .ended(retryMillis: stream.fields.withLock { $0.parser.retryMillis } ?? 5000)
            }
            return .failed
        }
        let (head, errorBody, retry) = stream.fields.withLock {
            ($0.head, $0.errorBody, $0.parser.retryMillis)
        }
        guard let head, head.status == 200 else {
            let status = head?.status ?? 0
            var response = head ?? ClientResponse(status: 0, headers: [])
            response.body = errorBody
            log("command stream refused: \(ClientError.from(response))")
            return .refused(status: status, retryAfter: response.retryAfterSeconds)
        }
        if !Task.isCancelled { log("command stream ended by the server") }
        return .ended(retryMillis: retry ?? 5000)
    }

    private func streamBytes(_ bytes: [UInt8], _ stream: StreamState) {
        let events: [SSEEvent]? = stream.fields.withLock { fields in
            guard fields.head?.status == 200 else {
                if fields.errorBody.count < 4096 { fields.errorBody += bytes.prefix(4096) }
                return nil
            }
            do {
                return try fields.parser.feed(bytes)
            } catch {
                log("command stream unreadable: \(error)")
                return nil
            }
        }
        for event in events ?? [] { streamEvent(event) }
    }

    private func streamEvent(_ event: SSEEvent) {
        let data = Array(event.data.utf8)
        switch event.type {
        case "command":
            guard let command = try? ClientCommand.parse(data) else {
                log("command stream: unreadable command \(event.data.prefix(200))")
                return
            }
            perform(
                ledger { ledger in
                    if let id = event.lastEventID { ledger.lastEventID = id }
                    return ledger.received(command)
                }, seen: "\(command.kind) \(command.commandID) (stream)")
        case "ready":
            guard let open = try? ReadyEvent.open(data) else { return }
            perform(ledger { $0.ready(open: open) }, seen: "closed while away")
        case "ended":
            guard let ended = try? EndedEvent(data) else { return }
            perform(
                ledger { $0.ended(commandID: ended.commandID, state: ended.state) },
                seen: "\(ended.commandID) ended (\(ended.state))")
        default:
            return
        }
    }
}
