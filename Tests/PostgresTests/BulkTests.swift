import Foundation
import Postgres
import Testing

/// 10,000 rows whose text hits every COPY and array escape, with NULLs scattered through.
private func awkwardRows(_ count: Int) -> [[PostgresValue?]] {
    (0..<count).map { index in
        let text = awkwardTexts[index % awkwardTexts.count] + (index % 3 == 0 ? "\t\(index)\n\\" : "")
        return [
            .int64(Int64(index)), .text(text), index % 7 == 0 ? nil : .double(Double(index) / 3),
            .bool(index % 2 == 0), .bytes([UInt8(index & 0xff), 0x5c, 0x0a, 0x09]),
            .timestamp(micros: 1_700_000_000_000_000 + Int64(index) * 1_000_001),
            index % 5 == 0 ? nil : .text("\\N"),
        ]
    }
}

private let columns = ["id", "t", "d", "b", "y", "ts", "n"]
private let columnTypes: [PostgresArray.ElementType] = [
    .bigint, .text, .float8, .boolean, .bytea, .timestamptz, .text,
]

private func createTable(_ connection: PostgresConnection, _ prefix: String) throws -> String {
    let table = uniqueTable(prefix)
    try connection.executeScript(
        "CREATE TABLE \(table) (id bigint PRIMARY KEY, t text NOT NULL, d float8, b bool NOT NULL, y bytea NOT NULL, "
            + "ts timestamptz NOT NULL, n text)")
    return table
}

private func readBack(_ connection: PostgresConnection, _ table: String) throws -> [[PostgresValue?]] {
    let result = try connection.execute("SELECT \(columns.joined(separator: ", ")) FROM \(table) ORDER BY id")
    return try (0..<result.rowCount).map { row in
        [
            try result.int64(row, "id").map { .int64($0) }, result.string(row, "t").map { .text($0) },
            try result.double(row, "d").map { .double($0) }, try result.bool(row, "b").map { .bool($0) },
            try result.bytes(row, "y").map { .bytes($0) },
            try result.timestampMicros(row, "ts").map { .timestamp(micros: $0) },
            result.string(row, "n").map { .text($0) },
        ]
    }
}

extension PostgresTests {
    @Test func copyInLoadsAwkwardRowsIdentically() throws {
        let connection = try Cluster.connect()
        let table = try createTable(connection, "copy")
        let rows = awkwardRows(10_000)
        let copied = try connection.copyIn(table: table, columns: columns, rows: rows)
        #expect(copied == rows.count)
        #expect(try readBack(connection, table) == rows)
    }

    @Test func unnestInsertLoadsAwkwardRowsIdentically() throws {
        let connection = try Cluster.connect()
        let table = try createTable(connection, "unnest")
        let rows = awkwardRows(10_000)
        func column(_ index: Int) -> [PostgresValue?] { rows.map { $0[index] } }
        let inserted = try connection.execute(
            "INSERT INTO \(table) (\(columns.joined(separator: ", "))) SELECT * FROM unnest("
                + "$1::bigint[], $2::text[], $3::float8[], $4::bool[], $5::bytea[], $6::timestamptz[], $7::text[])",
            zip(columnTypes, (0..<columns.count).map(column)).map { .array(PostgresArray($0, $1)) }
        ).affectedRows
        #expect(inserted == rows.count)
        #expect(try readBack(connection, table) == rows)
    }

    @Test func aRejectedCopyStoresNothingAndLeavesTheConnectionUsable() throws {
        let connection = try Cluster.connect()
        let table = try createTable(connection, "copyfail")
        var rows = awkwardRows(100)
        rows.append(rows[0])
        _ = expectPostgresError(sqlState: PostgresError.uniqueViolation, kind: .copy) {
            try connection.copyIn(table: table, columns: columns, rows: rows)
        }
        rows[100] = [
            .int64(100), .text("nul \u{0} inside"), nil, .bool(true), .bytes([]), .timestamp(micros: 0), nil,
        ]
        _ = expectPostgresError(kind: .parameter) {
            try connection.copyIn(table: table, columns: columns, rows: rows)
        }
        #expect(try connection.execute("SELECT count(*) FROM \(table)").int64(0, 0) == 0)
    }
}
