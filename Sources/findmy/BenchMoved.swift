import CLI
import Events

/// `findmy bench` and `findmy log bench|load` moved to `findmy-bench`, so that the shipped CLI
/// holds commands only. The old names stay, unlisted, to say where they went.
enum BenchMoved {
    static let command = Command(name: "bench", summary: "moved to findmy-bench", listed: false) {
        arguments in
        let driver = arguments.first.flatMap { ["ingest", "read", "project"].contains($0) ? $0 : nil }
        return movedToFindmyBench("findmy bench" + (driver.map { " " + $0 } ?? ""), driver: driver)
    }
}

/// Says where a driver went; exit status 2, as for any other usage error.
func movedToFindmyBench(_ old: String, driver: String?) -> Int32 {
    let new = "findmy-bench" + (driver.map { " " + $0 } ?? "")
    writeStandardError(
        "findmy: `\(old)` moved to its own executable: run `\(new)` with the same options instead. "
            + "findmy-bench is built beside findmy (`swift build -c release` puts both in "
            + "`swift build -c release --show-bin-path`); `findmy-bench --help` lists the drivers, "
            + "docs/benchmarks.md the figures.")
    return 2
}
