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
        for driver in ["ingest", "read", "project", "log", "load"] {
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
        // Overland's 1,000-fix batches against native: every request answered {"result":"ok"}.
        let overland = try #require(result["overland"])
        for side in ["native", "overland"] {
            #expect(try overland[side]!["acknowledged_fixes_per_s"]!.doubleValue > 0, "\(side)")
            #expect(overland[side]!["failed_requests"] == .integer(0), "\(side)")
        }
        #expect(try overland["overland_over_native_ratio"]!.doubleValue > 0)
    }
}
