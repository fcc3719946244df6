import Events
import Foundation
import HTTPClient
import JSON
import Postgres
import Synchronization
import Testing

/// `findmy backup` while the server takes reports, `findmy restore` into a new directory, and a
/// server started on it answering the same devices and history; a backup after a compaction holds
/// no expired fix.
@Suite struct BackupTests {
    final class Shared: Sendable {
        let acknowledged = Mutex<Set<Double>>([])
        let stop = Atomic<Bool>(false)
        /// Set by the reporter once it has stopped: no request of its own is in flight.
        let finished = Atomic<Bool>(false)
        var acknowledgedCount: Int { acknowledged.withLock { $0.count } }
    }

    static let day: Int64 = 86_400_000_000

    func backup(_ data: String, to target: String) throws -> JSONValue {
        let result = try FindmyProcess.run(["backup", "--data-dir", data, "--to", target, "--json"])
        guard result.status == 0 else { throw TestFailure("backup failed: \(result.error)") }
        let verify = try FindmyProcess.run(["log", "verify", "--data-dir", target])
        #expect(verify.status == 0, "the backup verifies: \(verify.output) \(verify.error)")
        return try JSONParser.parse(result.output)
    }

    /// Every latitude decoded from every record of a log directory.
    func latitudes(_ log: String) throws -> Set<Double> {
        var found = Set<Double>()
        try LogReader(directory: log).read(from: 0) { record in
            if !record.header.isPayloadRemoved, case .fixBatch(let batch) = try record.event() {
                for fix in batch.fixes { found.insert(fix.latitude) }
            }
            return true
        }
        return found
    }

    /// What a reader sees: each device's id and name, and its whole history (latitude and time).
    func readView(_ connection: HTTPConnection, token: String) throws -> [String: [String]] {
        let devices = try get(connection, "/api/find-my/devices", token: token)
        guard devices.status == 200 else { throw TestFailure("devices: \(devices.status) \(devices.body)") }
        var view: [String: [String]] = [:]
        for device in try devices.body["devices"]!.arrayValue {
            let id = try device["id"]!.int64Value
            let history = try ReadAPITests().walk(
                connection, "/api/find-my/devices/\(id)/locations", token: token, limit: 500
            ).locations
            view["\(id) \(try device["name"]!.stringValue)"] = try history.map {
                "\(try $0["latitude"]!.doubleValue) \(try $0["recorded_at"]!.stringValue)"
            }.sorted()
        }
        return view
    }

    @Test func backupWhileReportingThenRestoreAndServeTheSameHistory() throws {
        let data = ScratchDirectory("findmy-backup")
        let copies = ScratchDirectory("findmy-backup-copies")
        let server = try ServerProcess(
            data: data.path, extraArguments: ["--projector", "on", "--segment-bytes-max", "4096"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let user = try addUser("alice", data: data.path)
        var tokens: [String] = []
        for name in ["phone", "laptop"] {
            tokens.append(
                try enrol(connection, userToken: user, uuid: UUID().uuidString, name: name).string(
                    "device_token")!)
        }
        // Clients report while the backup is taken.
        let shared = Shared()
        let reporter = Thread { [tokens, shared, address = server.address] in
            let client = HTTPConnection(address: address)
            var latitude = 1.0
            var turn = 0
            while !shared.stop.load(ordering: .relaxed) {
                turn += 1
                var fixes: [String] = []
                var sent: [Double] = []
                for _ in 0..<5 {
                    latitude = ((latitude + 0.0001) * 10_000).rounded() / 10_000
                    fixes.append(fixJSON(latitude: latitude, secondsAgo: 120))
                    sent.append(latitude)
                }
                let answer = try? post(
                    client, "/api/find-my/report", token: tokens[turn % 2],
                    body: reportBody(batchID: UUID().uuidString, fixes: fixes))
                if answer?.status == 200 { shared.acknowledged.withLock { $0.formUnion(sent) } }
            }
            shared.finished.store(true, ordering: .releasing)
        }
        reporter.start()
        defer { shared.stop.store(true, ordering: .relaxed) }
        // Fixes are acknowledged before the backup starts, while it runs and after it ends.
        #expect(waitUntil(timeoutSeconds: 120) { shared.acknowledgedCount >= 20 })
        let before = shared.acknowledged.withLock { $0 }
        let during = try backup(data.path, to: copies.path + "/during")
        let afterBackup = shared.acknowledgedCount
        #expect(waitUntil(timeoutSeconds: 120) { shared.acknowledgedCount >= afterBackup + 20 })
        shared.stop.store(true, ordering: .relaxed)
        #expect(waitUntil(timeoutSeconds: 120) { shared.finished.load(ordering: .acquiring) })
        #expect(!before.isEmpty)
        #expect(try during["projection"]!.stringValue.contains("rebuilt"))
        let inBackup = try latitudes(copies.path + "/during/log")
        #expect(before.isSubset(of: inBackup), "every fix acknowledged before the backup started is in it")

        // A backup of the quiet server, restored into a new directory and served.
        let quiet = try backup(data.path, to: copies.path + "/quiet")
        #expect(
            try latitudes(copies.path + "/quiet/log") == shared.acknowledged.withLock { $0 }.union(inBackup))
        let restoredData = copies.path + "/restored"
        let restore = try FindmyProcess.run([
            "restore", "--from", copies.path + "/quiet", "--data-dir", restoredData, "--json",
        ])
        #expect(restore.status == 0, "\(restore.error)")
        let restored = try JSONParser.parse(restore.output)
        let restoredEnd = try restored["end_offset"]!.int64Value
        let backupEnd = try quiet["durable_end"]!.int64Value
        #expect(restored["verified"] == .bool(true) && restoredEnd == backupEnd)
        let again = try FindmyProcess.run([
            "restore", "--from", copies.path + "/quiet", "--data-dir", restoredData,
        ])
        #expect(
            again.status != 0 && again.error.contains("--force"), "a non-empty directory is not overwritten")

        try waitForProjector(data.path)
        let original = try readView(connection, token: user)
        let second = try ServerProcess(data: restoredData, extraArguments: ["--projector", "on"])
        defer { second.stop() }
        try waitForProjector(restoredData)
        let copy = try readView(HTTPConnection(address: second.address), token: user)
        #expect(
            original.count == 2 && copy == original,
            "the restored server answers the same devices and history")
    }

    @Test func aBackupAfterACompactionHoldsNoExpiredFix() throws {
        let data = ScratchDirectory("findmy-backup-compact")
        let server = try ServerProcess(data: data.path, extraArguments: ["--segment-bytes-max", "4096"])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let user = try addUser("alice", data: data.path)
        let enrolled = try enrol(connection, userToken: user, uuid: UUID().uuidString)
        let token = enrolled.string("device_token")!
        var live = Set<Double>()
        var expired = Set<Double>()
        for batch in 0..<20 {
            var fixes: [String] = []
            for index in 0..<6 {
                let latitude = Double(batch) + Double(index) / 10 + 0.01
                let old = index % 2 == 0
                fixes.append(fixJSON(latitude: latitude, secondsAgo: old ? (2 + batch) * 86_400 : 600))
                if old { expired.insert(latitude) } else { live.insert(latitude) }
            }
            let answer = try post(
                connection, "/api/find-my/report", token: token,
                body: reportBody(batchID: UUID().uuidString, fixes: fixes))
            #expect(answer.status == 200 && answer.int("accepted") == 6, "\(answer.body)")
        }
        let window = try FindmyProcess.run([
            "retention", "set", "--device", String(enrolled.int("device_id")!), "--days", "1", "--data-dir",
            data.path,
        ])
        #expect(window.status == 0, "\(window.error)")
        let older = ScratchDirectory("findmy-backup-older")
        _ = try backup(data.path, to: older.path + "/b")
        #expect(
            try latitudes(older.path + "/b/log") == live.union(expired),
            "a backup from before holds everything")

        let compact = try FindmyProcess.run(["compact", "--data-dir", data.path])
        #expect(compact.status == 0, "\(compact.error)")
        let after = ScratchDirectory("findmy-backup-after")
        _ = try backup(data.path, to: after.path + "/b")
        #expect(
            try latitudes(after.path + "/b/log") == live,
            "a backup after the compaction holds only live fixes")
        // The older backup still holds what it held: retention cannot reach it.
        #expect(try latitudes(older.path + "/b/log") == live.union(expired))
    }
}
