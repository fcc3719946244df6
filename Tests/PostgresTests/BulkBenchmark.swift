import Foundation
import Postgres
import Testing

/// COPY against unnest for fix-shaped rows, so the projector can choose. Prints figures; asserts
/// only that both stored every row. Run with FINDMY_PG_BENCH=1.
extension PostgresTests {
    @Test(.enabled(if: ProcessInfo.processInfo.environment["FINDMY_PG_BENCH"] != nil))
    func bulkLoadBenchmarkCopyAgainstUnnest() throws {
        let connection = try Cluster.connect()
        let rowCount = 100_000
        let rows = (0..<rowCount).map(fixRow)
        let columns = [
            "device", "recorded_at", "received_at", "lat", "lon", "accuracy_m", "battery_pct", "source",
        ]
        var copyMillis: [Int] = []
        var unnestMillis: [Int] = []
        for _ in 0..<3 {
            for useCopy in [true, false] {
                try connection.executeScript(
                    "DROP TABLE IF EXISTS bench; CREATE TABLE bench (device bigint, recorded_at timestamptz, "
                        + "received_at timestamptz, lat float8, lon float8, accuracy_m float8, battery_pct float8, "
                        + "source text)")
                let start = ContinuousClock.now
                let stored: Int
                if useCopy {
                    stored = try connection.copyIn(table: "bench", columns: columns, rows: rows)
                } else {
                    stored = try connection.execute(
                        "INSERT INTO bench SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], "
                            + "$4::float8[], $5::float8[], $6::float8[], $7::float8[], $8::text[])",
                        (0..<columns.count).map { column in .array(rows.map { $0[column] }) }
                    ).affectedRows
                }
                let millis = Int((ContinuousClock.now - start) / .milliseconds(1))
                #expect(stored == rowCount)
                if useCopy { copyMillis.append(millis) } else { unnestMillis.append(millis) }
            }
        }
        let copyBest = copyMillis.min()!
        let unnestBest = unnestMillis.min()!
        print(
            "bulk load of \(rowCount) fix rows, best of 3: COPY \(copyBest) ms (\(rowCount * 1000 / max(copyBest, 1)) rows/s), "
                + "unnest \(unnestBest) ms (\(rowCount * 1000 / max(unnestBest, 1)) rows/s), "
                + "unnest/COPY \(String(format: "%.2f", Double(unnestBest) / Double(max(copyBest, 1))))")
    }
}

private func fixRow(_ index: Int) -> [PostgresValue?] {
    let second = Int64(index) * 1_000_000
    let battery: PostgresValue? = index % 4 == 0 ? nil : .double(Double(index % 100))
    return [
        .int64(Int64(index % 50)), .timestamp(micros: 1_700_000_000_000_000 + second),
        .timestamp(micros: 1_700_000_000_500_000 + second), .double(52.5 + Double(index) * 1e-6),
        .double(13.4 - Double(index) * 1e-6), .double(12.5), battery, .text("significant"),
    ]
}
