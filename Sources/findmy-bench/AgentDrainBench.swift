import CLI
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The drain phase of `findmy-bench agent`: the server away while the agent queues a burst of
/// fixes, then back on the same address; how soon the agent has it all stored.
extension AgentRig {
    /// Fixes per batch: the agent's default `--batch-fixes`, which the driver leaves as it is.
    static let batchFixes = 100

    struct Drain {
        var fixes: Int
        var batches = 0
        var duplicates = 0
        /// From the restarted server's first line (it listens) to the first batch stored, and to
        /// the last.
        var firstBatchMicros: Int64 = 0
        var lastBatchMicros: Int64 = 0
        /// From the server's stop to its return (the agent's queue filling meanwhile).
        var downMicros: Int64 = 0

        var json: String {
            "\"fixes\": \(fixes), \"batches\": \(batches), \"duplicate_batches\": \(duplicates), "
                + "\"server_down_ms\": \(downMicros / 1_000), \"back_to_first_batch_ms\": \(firstBatchMicros / 1_000), "
                + "\"back_to_drained_ms\": \(lastBatchMicros / 1_000), "
                + "\"first_to_last_batch_ms\": \((lastBatchMicros - firstBatchMicros) / 1_000)"
        }
    }

    /// Stops the server; the driver's gpsd writes `fixes` reports at once and then none; once the
    /// agent has them in sealed batches (`findmy-agent status`), the server starts again where it
    /// was, and the agent's log says when each batch was stored. `fixes` is a multiple of
    /// `batchFixes`: the batch left open before the burst (fewer than `batchFixes` fixes) is filled
    /// by it, so sealed batches hold exactly `fixes` fixes and the open one as many as before.
    func drain(_ fixes: Int) throws -> Drain {
        var drain = Drain(fixes: fixes)
        let address = server.address
        let stopped = monotonicMicros()
        server.stop()
        gpsd.burst(fixes)
        defer { gpsd.resume() }
        // The agent's waits grow while the server is away (to 300 s × 1.5 at most): the drain's own
        // waits allow for them rather than fail the run.
        let longDeadline = monotonicMicros() + max(Int64(settings.timeoutSeconds), 600) * 1_000_000
        while try readyBatches() * Self.batchFixes < fixes {
            guard monotonicMicros() < longDeadline else {
                throw UsageError("the agent did not queue \(fixes) fixes; see \(settings.root)/agent.log")
            }
            usleep(200_000)
        }
        var index = log.count
        server = try ChildServer(
            dataDirectory: settings.root + "/server", logPath: settings.root + "/server-restarted.log",
            projector: true, listen: address, arguments: AgentRig.serverArguments)
        let back = monotonicMicros()
        drain.downMicros = back - stopped
        var stored = 0
        while stored < fixes {
            let line = log.wait(from: index, deadline: longDeadline) {
                $0.contains("batch ") && $0.contains(" fixes accepted")
            }
            guard let line else {
                throw UsageError(
                    "\(stored) of \(fixes) fixes stored in time; "
                        + "see \(settings.root)/agent.log")
            }
            index = line.index + 1
            let text = log.line(line.index)
            // "batch ID stored: A of B fixes accepted" or "batch ID was already stored: ..."
            guard let colon = text.range(of: "stored: ") else { continue }
            let words = text[colon.upperBound...].split(separator: " ")
            guard words.count > 2, let inBatch = Int(words[2]) else { continue }
            stored += inBatch
            drain.batches += 1
            if text.contains("was already stored") { drain.duplicates += 1 }
            if drain.batches == 1 { drain.firstBatchMicros = line.micros - back }
            drain.lastBatchMicros = line.micros - back
        }
        return drain
    }

    /// Sealed batches in the agent's queue, as `findmy-agent status` says
    /// ("queued: N fixes, B batches ready to send, R refused batches kept").
    private func readyBatches() throws -> Int {
        let status = try runCapturing(
            try agentExecutable(), ["findmy-agent", "status", "--state-dir", settings.root + "/agent"])
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("queued: ") }) else {
            throw UsageError("findmy-agent status said: \(status)")
        }
        let words = line.split(separator: " ")
        guard words.count > 3, let batches = Int(words[3]) else {
            throw UsageError("findmy-agent status said: \(line)")
        }
        return batches
    }
}
