import Foundation
import JSON
import TestSupport
import Testing

/// `findmy user` goes through the server's admin socket when one answers and opens the log itself
/// otherwise: one path for both, so a user sees the same answers and the same errors either way.
@Suite(.serialized) struct AdminCallTests {
    /// What a user sees from each command: exit status, and standard output or the error line.
    func transcript(_ data: String) throws -> [String] {
        var lines: [String] = []
        let commands: [[String]] = [
            ["user", "add", "anna"],
            ["user", "role", "anna", "admin"],
            ["user", "role", "nobody", "admin"],
            ["user", "token", "nobody", "--rotate"],
            ["user", "list"],
        ]
        for command in commands {
            let result = try FindmyProcess.run(command + ["--data-dir", data])
            lines.append(
                "\(command.joined(separator: " ")): \(result.status) \(result.status == 0 ? result.output : result.error)"
            )
        }
        return lines
    }

    @Test func theSocketAndTheLogGiveTheSameAnswersAndErrors() throws {
        let offline = ScratchDirectory("findmy-admin-offline")
        _ = try FindmyProcess.run(["user", "add", "zed", "--data-dir", offline.path])
        let offlineLines = try transcript(offline.path)

        let online = ScratchDirectory("findmy-admin-online")
        _ = try FindmyProcess.run(["user", "add", "zed", "--data-dir", online.path])
        let server = try ServerProcess(data: online.path)
        defer { server.stop() }
        let onlineLines = try transcript(online.path)

        #expect(offlineLines.count == 5)
        for (offlineLine, onlineLine) in zip(offlineLines, onlineLines)
        where !offlineLine.hasPrefix("user add") {
            #expect(offlineLine == onlineLine)
        }
        #expect(offlineLines[0].contains("created user 2 'anna'"), "\(offlineLines[0])")
        #expect(onlineLines[0].contains("created user 2 'anna'"), "\(onlineLines[0])")
        #expect(offlineLines[2].contains("nobody") && !offlineLines[2].hasPrefix("user role nobody admin: 0"))
    }

    @Test func addingATakenNameFailsTheSameWayThroughTheSocketAndTheLog() throws {
        let data = ScratchDirectory("findmy-admin-taken")
        #expect(try FindmyProcess.run(["user", "add", "anna", "--data-dir", data.path]).status == 0)
        let offline = try FindmyProcess.run(["user", "add", "anna", "--data-dir", data.path])
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let online = try FindmyProcess.run(["user", "add", "anna", "--data-dir", data.path])
        #expect(offline.status != 0 && online.status == offline.status)
        #expect(
            online.error == offline.error && offline.error.contains("anna"),
            "\(offline.error) / \(online.error)")
    }

    /// `--data-dir data` as a user types it in their own directory: the server starts (its admin
    /// socket's address is built from the data directory and must be absolute), and `findmy user`
    /// given the same relative path finds it.
    @Test func aRelativeDataDirectoryServesAndTakesAdminCalls() throws {
        let base = ScratchDirectory("findmy-admin-relative")
        let added = try FindmyProcess.run(
            ["user", "add", "zed", "--data-dir", "data"], workingDirectory: base.path)
        #expect(added.status == 0, "\(added.error)")
        let server = try FindmyProcess(
            ["serve", "--data-dir", "data", "--listen", "127.0.0.1:0", "--projector", "off"],
            workingDirectory: base.path)
        defer {
            server.kill(SIGTERM)
            server.wait(timeoutSeconds: 30)
        }
        try waitUntil("the server prints its URL or exits") {
            !server.outputLines.isEmpty || !server.process.isRunning
        }
        #expect(server.outputLines.first?.hasPrefix("http://") == true, "\(server.standardError)")
        try waitUntil("the admin socket exists") {
            access(base.path + "/data/admin.sock", F_OK) == 0 || !server.process.isRunning
        }
        let online = try FindmyProcess.run(
            ["user", "add", "anna", "--data-dir", "data"], workingDirectory: base.path)
        #expect(online.status == 0 && online.output.contains("created user 2 'anna'"), "\(online.error)")
    }
}
