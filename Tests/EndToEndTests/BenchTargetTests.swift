import Foundation
import JSON
import Testing

/// The benchmark drivers live in `findmy-bench`, beside `findmy` in the build's bin path; the shipped
/// `findmy` holds commands only and sends anyone who asks it for a benchmark to the other executable.
@Suite struct BenchTargetTests {
    @Test func findmyBenchPointsAtFindmyBench() throws {
        let scratch = ScratchDirectory("findmy-bench-moved")
        let answer = try FindmyProcess.run(["bench", "ingest", "--dir", scratch.path])
        #expect(answer.status == 2)
        #expect(answer.error.contains("findmy-bench ingest"), "\(answer.error)")
        #expect(answer.output.isEmpty)
    }

    @Test func findmyLogBenchPointsAtFindmyBench() throws {
        let scratch = ScratchDirectory("findmy-bench-moved")
        let answer = try FindmyProcess.run(["log", "bench", "--dir", scratch.path])
        #expect(answer.status == 2)
        #expect(answer.error.contains("findmy-bench log"), "\(answer.error)")
    }

    @Test func findmyHelpListsNoBenchmark() throws {
        let help = try FindmyProcess.run(["--help"])
        #expect(help.status == 0)
        #expect(!help.output.contains("bench"), "\(help.output)")
        let logHelp = try FindmyProcess.run(["log", "--help"])
        #expect(!logHelp.output.contains("bench"), "\(logHelp.output)")
    }

    @Test func findmyBenchHelpListsTheDrivers() throws {
        let help = try FindmyProcess.run(["--help"], executable: benchExecutable())
        #expect(help.status == 0, "\(help.error)")
        for driver in ["ingest", "ingest-nodes", "read", "project", "log", "load"] {
            #expect(help.output.contains("\n  \(driver) "), "\(driver) missing from:\n\(help.output)")
        }
        let unknown = try FindmyProcess.run(["serve"], executable: benchExecutable())
        #expect(unknown.status == 2)
        #expect(unknown.error.contains("findmy-bench --help"), "\(unknown.error)")
    }

    /// The ingest driver starts the real `findmy serve` found beside it, enrols a device through
    /// the CLI and the API, and gets its reports acknowledged.
    @Test func ingestDriverStartsTheServerBesideIt() throws {
        let scratch = ScratchDirectory("findmy-bench-ingest")
        let run = try FindmyProcess.run(
            [
                "ingest", "--dir", scratch.path, "--seconds", "1", "--connections", "1", "--fixes", "1",
                "--client", "swift",
            ], executable: benchExecutable())
        #expect(run.status == 0, "\(run.error)")
        let result = try JSONParser.parse(run.output)
        let runs = try result["runs"]!.arrayValue
        #expect(runs.count == 1)
        #expect(try runs[0]["acknowledged_fixes_per_s"]!.doubleValue > 0)
        #expect(runs[0]["failed_requests"] == .integer(0))
        // Each app against native with the same fixes: Overland's 1,000-fix batches, every request
        // answered {"result":"ok"}, and OwnTracks' single messages, every one answered [] (the Swift
        // client checks each body).
        try Self.expectApps(result, ["overland", "owntracks"])
    }

    /// The ingest-nodes driver starts a three-node cluster, two ingest nodes on it and a server on
    /// a local log, and gets reports acknowledged by both targets, none failed.
    @Test func ingestNodesDriverMeasuresBothTargets() throws {
        let scratch = ScratchDirectory("findmy-bench-nodes")
        let run = try FindmyProcess.run(
            [
                "ingest-nodes", "--dir", scratch.path + "/bench", "--seconds", "1", "--rounds", "1",
                "--partitions", "2", "--connections", "2", "--fixes", "1",
            ], timeoutSeconds: 300, executable: benchExecutable())
        #expect(run.status == 0, "\(run.error)")
        let row = try #require(
            run.output.split(separator: "\n").last { $0.hasPrefix("P=2 F=1: ") },
            "no result row:\n\(run.output)")
        // "P=2 F=1: local N reports/s, ..., 0 failed; nodes N reports/s, ..., 0 failed; nodes/local R; ..."
        let parts = row.split(separator: ";").map(String.init)
        for (index, target) in ["local", "nodes"].enumerated() {
            let part = parts[index]
            let words = part.split(separator: " ")
            let rate = words.firstIndex(of: Substring(target)).flatMap { Double(words[$0 + 1]) } ?? 0
            #expect(rate > 0 && part.hasSuffix(" 0 failed"), "\(target): \(row)")
        }
        #expect(
            !FileManager.default.fileExists(atPath: scratch.path + "/bench"),
            "the driver removes its directory")
    }

    /// An app driven by wrk and ops/bench/report.lua (path, Basic credentials, headers, a unique id
    /// in each body): every request a 2xx. (wrk counts only what is answered within its `-d`, and a
    /// debug build answers few 1,000-fix batches in a second: OwnTracks' single messages here.)
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/wrk")))
    func ingestDriverDrivesTheAppsWithWrk() throws {
        let scratch = ScratchDirectory("findmy-bench-ingest-wrk")
        let run = try FindmyProcess.run(
            [
                "ingest", "--dir", scratch.path, "--seconds", "1", "--client", "wrk", "--phases", "owntracks",
            ], executable: benchExecutable())
        #expect(run.status == 0, "\(run.error)")
        let result = try JSONParser.parse(run.output)
        #expect(try result["runs"]!.arrayValue.isEmpty, "no native grid when its phase is not asked for")
        try Self.expectApps(result, ["owntracks"])
    }

    /// The agent driver starts the real findmy, its own gpsd and the real findmy-agent beside it:
    /// each sound ran the agent's sound command, the lost reached the agent's log, each locate was
    /// answered by a report of the driver's gpsd written after it was asked, and the drained
    /// batches were stored once each.
    @Test func agentDriverMeasuresEveryPhase() throws {
        let scratch = ScratchDirectory("findmy-bench-agent")
        let run = try FindmyProcess.run(
            [
                "agent", "--dir", scratch.path, "--sounds", "2", "--lost", "1", "--locates", "2",
                "--tpv-interval-millis", "100", "--drain-fixes", "200",
            ], timeoutSeconds: 300, executable: benchExecutable())
        #expect(run.status == 0, "\(run.error)")
        let result = try JSONParser.parse(run.output)
        for (phase, count) in [("sound", 2), ("stream_baseline", 2), ("mark_exec_baseline", 2), ("lost", 1)] {
            #expect(result[phase]?["count"] == .integer(Int64(count)), "\(phase): \(run.output)")
            #expect(try result[phase]!["max_ms"]!.doubleValue > 0, "\(phase)")
        }
        for figure in ["tpv_to_status", "post_to_status"] {
            #expect(result["locate"]?[figure]?["count"] == .integer(2), "\(figure): \(run.output)")
        }
        #expect(result["drain"]?["batches"] == .integer(2), "\(run.output)")
        #expect(result["drain"]?["duplicate_batches"] == .integer(0), "\(run.output)")
        #expect(try result["agent_rss_bytes"]!.int64Value > 0)
    }

    /// The drain moves whole batches of the agent: any other number is a usage error, before
    /// anything starts.
    @Test func agentDriverRefusesADrainOfPartBatches() throws {
        let scratch = ScratchDirectory("findmy-bench-agent-usage")
        let run = try FindmyProcess.run(
            ["agent", "--dir", scratch.path, "--drain-fixes", "150"], executable: benchExecutable())
        #expect(run.status == 2)
        #expect(run.error.contains("--drain-fixes must be a multiple of 100"), "\(run.error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty)
    }

    static func expectApps(_ result: JSONValue, _ apps: [String]) throws {
        let pairs = try #require(result["apps"]).arrayValue
        #expect(try pairs.map { try $0["app"]!.stringValue } == apps)
        for pair in pairs {
            let app = try pair["app"]!.stringValue
            for side in ["native", app] {
                #expect(try pair[side]!["acknowledged_fixes_per_s"]!.doubleValue > 0, "\(app): \(side)")
                #expect(pair[side]!["failed_requests"] == .integer(0), "\(app): \(side)")
            }
            #expect(try pair["app_over_native_ratio"]!.doubleValue > 0, "\(app)")
        }
    }
}
