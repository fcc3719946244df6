import Foundation
import JSON
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
}
