import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// The retention compactor killed with SIGKILL at random moments: inside `findmy serve` (a one-second
/// schedule, the whole server killed while clients report) and as `findmy compact` alone. Afterwards
/// the log verifies, every acknowledged unexpired fix is in the log and in `device_locations`, and no
/// fix a compaction removed ever comes back.
@Suite struct CompactionCrashTests {
    static let day: Int64 = 86_400_000_000

    /// What the test knows about every fix it sent: its device and when it was taken, and whether
    /// the server acknowledged it (a fix whose answer was lost to the kill may or may not be in the
    /// log). Latitudes are unique, so a latitude names one fix.
    struct Acknowledged {
        var device: [Double: Int64] = [:]
        var recordedAt: [Double: Int64] = [:]
        var confirmed = Set<Double>()
        var nextLatitude = 1.0

        mutating func newLatitude() -> Double {
            nextLatitude += 0.0001
            return (nextLatitude * 10_000).rounded() / 10_000
        }
    }

    /// Every latitude in a decoded fix batch of the log (`findmy log dump --json`).
    func logLatitudes(_ data: String) throws -> Set<Double> {
        var found = Set<Double>()
        for batch in try dumpLog(data).batches {
            for fix in batch.fixes { found.insert(try fix["latitude"]!.doubleValue) }
        }
        return found
    }

    func verifyLog(_ data: String, seed: UInt64) throws {
        let verify = try FindmyProcess.run(["log", "verify", "--data-dir", data])
        #expect(verify.status == 0, "seed \(seed): log verify: \(verify.output) \(verify.error)")
    }

    /// Reports batches until the server dies; returns how many were acknowledged.
    func reportUntilKilled(
        _ server: ServerProcess, tokens: [String: String], devices: [String: Int64],
        into acknowledged: inout Acknowledged, random: inout SplitMix
    ) -> Int {
        let connection = HTTPConnection(address: server.address)
        var batches = 0
        while server.process.process.isRunning {
            let name = random.next() % 2 == 0 ? "short" : "long"
            var fixes: [String] = []
            var sent: [(Double, Int64)] = []
            let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
            for _ in 0..<(1 + Int(random.next() % 8)) {
                let latitude = acknowledged.newLatitude()
                // Fresh (under an hour), or for "long" two to twenty days old (live until the
                // 25-days-later compaction below).
                let secondsAgo =
                    name == "long" && random.next() % 3 == 0
                    ? 2 * 86_400 + Int(random.next() % (18 * 86_400)) : 60 + Int(random.next() % 3_000)
                fixes.append(fixJSON(latitude: latitude, secondsAgo: secondsAgo))
                sent.append((latitude, now - Int64(secondsAgo) * 1_000_000))
                acknowledged.device[latitude] = devices[name]!
                acknowledged.recordedAt[latitude] = now - Int64(secondsAgo) * 1_000_000
            }
            guard
                let answer = try? post(
                    connection, "/api/find-my/report", token: tokens[name]!,
                    body: reportBody(batchID: UUID().uuidString, fixes: fixes)),
                answer.status == 200, answer.int("accepted") == Int64(fixes.count)
            else { continue }
            batches += 1
            for (latitude, _) in sent { acknowledged.confirmed.insert(latitude) }
        }
        return batches
    }

    func setWindow(_ connection: HTTPConnection, device: Int64, days: Int, token: String) throws {
        let response = try connection.send(
            "PUT", "/api/find-my/devices/\(device)/retention",
            headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(token)")],
            body: Array("{\"days\": \(days)}".utf8))
        guard response.status == 200 else { throw TestFailure("PUT retention: \(response.status)") }
    }

    @Test func compactionKilledAtRandomMomentsLosesNothingLiveAndBringsNothingBack() throws {
        let seed = UInt64.random(in: 1...1_000_000)
        print("CompactionCrashTests seed: \(seed)")
        var random = SplitMix(seed: seed)
        let data = ScratchDirectory("findmy-compactcrash")
        let serverArguments = [
            "--projector", "on", "--compact-interval-seconds", "1", "--segment-bytes-max", "4096",
        ]
        let cluster = try EmbeddedPostgres(dataDirectory: data.path)
        defer { try? cluster.stop() }
        var acknowledged = Acknowledged()
        var tokens: [String: String] = [:]
        var devices: [String: Int64] = [:]
        let user = try addUser("alice", data: data.path)
        // "short" keeps one day, "long" the default 30. Each round first widens "short" to 30 days,
        // reports old fixes to it, then narrows it to one day again: those fixes expire at once, and
        // the schedule compacts them while clients keep reporting and the server is killed.
        var removedEver = Set<Double>()
        for round in 0..<5 {
            let server = try ServerProcess(data: data.path, extraArguments: serverArguments)
            let connection = HTTPConnection(address: server.address)
            if round == 0 {
                for name in ["short", "long"] {
                    let answer = try enrol(connection, userToken: user, uuid: UUID().uuidString, name: name)
                    devices[name] = answer.int("device_id")!
                    tokens[name] = answer.string("device_token")!
                }
            }
            try setWindow(connection, device: devices["short"]!, days: 30, token: user)
            // Old and fresh fixes for a moment, then the short window, then fresh fixes until the kill.
            let widenedUntil = Date().addingTimeInterval(0.5)
            while Date() < widenedUntil {
                let name = "short"
                var fixes: [String] = []
                var sent: [(Double, Int64)] = []
                let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
                for index in 0..<4 {
                    let latitude = acknowledged.newLatitude()
                    let secondsAgo = index == 0 ? 60 : 2 * 86_400 + Int(random.next() % (18 * 86_400))
                    fixes.append(fixJSON(latitude: latitude, secondsAgo: secondsAgo))
                    sent.append((latitude, now - Int64(secondsAgo) * 1_000_000))
                }
                let answer = try post(
                    connection, "/api/find-my/report", token: tokens[name]!,
                    body: reportBody(batchID: UUID().uuidString, fixes: fixes))
                #expect(answer.status == 200 && answer.int("accepted") == 4, "seed \(seed): \(answer.body)")
                for (latitude, at) in sent {
                    acknowledged.device[latitude] = devices[name]!
                    acknowledged.recordedAt[latitude] = at
                    acknowledged.confirmed.insert(latitude)
                }
            }
            try setWindow(connection, device: devices["short"]!, days: 1, token: user)
            // A random moment to kill at, from the seed: choosing when, not waiting for anything.
            let delayMicros = UInt32(200_000 + random.next() % 2_800_000)
            let killed = DispatchSemaphore(value: 0)
            Thread { [server] in
                usleep(delayMicros)
                server.kill9()
                killed.signal()
            }.start()
            let batches = reportUntilKilled(
                server, tokens: tokens, devices: devices, into: &acknowledged, random: &random)
            killed.wait()
            #expect(batches > 0, "seed \(seed): round \(round) acknowledged nothing")

            // After each kill: the log verifies, every live acknowledged fix is in it, and nothing a
            // compaction already removed is back.
            try verifyLog(data.path, seed: seed)
            let inLog = try logLatitudes(data.path)
            let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
            for latitude in acknowledged.confirmed {
                let device = acknowledged.device[latitude]!
                let expired =
                    device == devices["short"]! && acknowledged.recordedAt[latitude]! < now - Self.day
                if !expired {
                    #expect(
                        inLog.contains(latitude), "seed \(seed): round \(round): live fix \(latitude) lost")
                } else if !inLog.contains(latitude) {
                    removedEver.insert(latitude)
                }
            }
            #expect(
                removedEver.isDisjoint(with: inLog), "seed \(seed): round \(round): removed fixes came back")
        }
        #expect(!removedEver.isEmpty, "seed \(seed): the scheduled compactions removed nothing")

        // `findmy compact` alone (the server stopped: it takes the log lock), as if 25 days had
        // passed, killed at random moments; then once to the end.
        let asOf = Int64(Date().timeIntervalSince1970 * 1_000_000) + 25 * Self.day
        func isLive(_ latitude: Double) -> Bool {
            let window = acknowledged.device[latitude] == devices["short"]! ? 1 : 30
            return acknowledged.recordedAt[latitude]! >= asOf - Int64(window) * Self.day
        }
        let compactArguments = ["compact", "--data-dir", data.path, "--as-of", RFC3339.formatMicros(asOf)]
        for _ in 0..<4 {
            let compact = try FindmyProcess(compactArguments)
            // A random moment to kill at, from the seed: choosing when, not waiting for anything.
            usleep(UInt32(50_000 + random.next() % 1_500_000))
            compact.kill()
            compact.wait()
            try verifyLog(data.path, seed: seed)
            let inLog = try logLatitudes(data.path)
            let lost = acknowledged.confirmed.filter { isLive($0) && !inLog.contains($0) }
            #expect(lost.isEmpty, "seed \(seed): live fixes lost by a killed compact: \(lost.prefix(5))")
            #expect(removedEver.isDisjoint(with: inLog), "seed \(seed): removed fixes came back")
        }

        // The server again: its projector catches up, one complete compaction as of the same time
        // (through the admin socket), and a second one for rows the projector raced in.
        let server = try ServerProcess(data: data.path, extraArguments: serverArguments)
        defer { server.stop() }
        try waitForProjector(data.path, cluster.conninfo)
        for _ in 0..<2 {
            let compact = try FindmyProcess.run(compactArguments)
            #expect(compact.status == 0, "seed \(seed): \(compact.error)")
            try waitForProjector(data.path, cluster.conninfo)
        }
        // Present: every acknowledged live fix. Allowed besides: live fixes whose answer the kill lost.
        let expected = acknowledged.confirmed.filter(isLive)
        let allowed = Set(acknowledged.device.keys.filter(isLive))
        #expect(!expected.isEmpty && expected.count < acknowledged.confirmed.count, "seed \(seed)")
        func describe(_ latitudes: Set<Double>) -> String {
            "\(latitudes.count): "
                + latitudes.sorted().prefix(5).map {
                    "\($0) device \(acknowledged.device[$0] ?? -1) recorded \(RFC3339.formatMicros(acknowledged.recordedAt[$0] ?? 0))"
                }.joined(separator: "; ")
        }
        let finalLog = try logLatitudes(data.path)
        #expect(
            expected.subtracting(finalLog).isEmpty,
            "seed \(seed): live fixes lost: \(describe(expected.subtracting(finalLog)))")
        #expect(
            finalLog.subtracting(allowed).isEmpty,
            "seed \(seed): expired fixes kept: \(describe(finalLog.subtracting(allowed)))")
        try verifyLog(data.path, seed: seed)
        let pg = try PostgresConnection(cluster.conninfo)
        defer { pg.close() }
        let rows = try pg.execute("SELECT latitude FROM findmy.device_locations")
        var inTable = Set<Double>()
        for row in 0..<rows.rowCount { inTable.insert(Double(rows.string(row, 0)!)!) }
        #expect(
            expected.subtracting(inTable).isEmpty,
            "seed \(seed): rows lost: \(describe(expected.subtracting(inTable)))")
        #expect(
            inTable.subtracting(allowed).isEmpty,
            "seed \(seed): expired rows kept: \(describe(inTable.subtracting(allowed)))")
        let latest = try pg.execute("SELECT latitude FROM findmy.device_latest")
        for row in 0..<latest.rowCount {
            #expect(
                allowed.contains(Double(latest.string(row, 0)!)!), "seed \(seed): an expired latest position")
        }
    }
}
