import Foundation
import Testing

@testable import Postgres

/// `copyOutBinary` against a real server: every value as `execute` reads it in binary, the rows in
/// order, the connection usable after every way a COPY can end.
extension PostgresTests {
    @Test func aBinaryCopyReadsTheValuesABinaryResultHolds() throws {
        let connection = try Cluster.connect()
        let table = uniqueTable("copyout")
        try connection.executeScript(
            "CREATE TABLE \(table) (id bigint PRIMARY KEY, d float8, s smallint, b bool, ts timestamptz, t text)"
        )
        let doubles: [Double?] = [0, -0.0, 52.5200001, .nan, .infinity, -.infinity, nil, 1e-300]
        let times: [Int64?] = [
            0, -62_135_596_800_000_000, 253_402_300_799_999_999, 1_700_000_000_123_456, nil,
        ]
        for index in 0..<300 {
            try connection.execute(
                "INSERT INTO \(table) VALUES ($1, $2, $3, $4, $5, $6)",
                [
                    .int64(Int64(index)), doubles[index % doubles.count].map { .double($0) },
                    index % 7 == 0 ? nil : .int64(Int64(index - 150)),
                    index % 3 == 0 ? nil : .bool(index % 2 == 0),
                    times[index % times.count].map { .timestamp(micros: $0) },
                    .text(awkwardTexts[index % awkwardTexts.count]),
                ])
        }
        let query = "SELECT id, d, s, b, ts, t FROM \(table) ORDER BY id"
        let expected = try connection.execute(query, format: .binary)
        var seen = 0
        let rows = try connection.copyOutBinary(query: query, fieldCount: 6) { row in
            #expect(row.number == seen)
            for column in 0..<6 {
                let field = row.next()
                let want = expected.binaryBytes(seen, column)
                #expect(field.map(Array.init) == want.map(Array.init), "row \(seen) column \(column)")
            }
            seen += 1
        }
        #expect(rows == 300 && seen == 300)
        // The connection is idle and usable after it.
        #expect(connection.isIdle)
        #expect(try connection.execute("SELECT 1").string(0, 0) == "1")
    }

    @Test func aCopyOfNoRowsCallsNothingAndAFailingQueryThrowsTheServersError() throws {
        let connection = try Cluster.connect()
        let none = try connection.copyOutBinary(query: "SELECT 1::bigint WHERE false", fieldCount: 1) { _ in
            Issue.record("a row of an empty COPY")
        }
        #expect(none == 0)
        _ = expectPostgresError(sqlState: "42P01") {
            try connection.copyOutBinary(query: "SELECT * FROM no_such_table_here", fieldCount: 1) { _ in }
        }
        // A failure while the rows stream (division by zero in the 5th row).
        _ = expectPostgresError(sqlState: "22012") {
            try connection.copyOutBinary(
                query: "SELECT 10 / (5 - g) FROM generate_series(1, 10) g", fieldCount: 1
            ) { _ in }
        }
        #expect(connection.isIdle)
        #expect(try connection.execute("SELECT 2").string(0, 0) == "2")
    }

    /// The caller's error ends the reading: the rest is drained, the error comes back as it was
    /// thrown, and the connection is usable.
    @Test func anErrorOfTheCallerIsRethrownAfterTheRestIsDrained() throws {
        struct Enough: Error {}
        let connection = try Cluster.connect()
        var calls = 0
        #expect(throws: Enough.self) {
            try connection.copyOutBinary(query: "SELECT g FROM generate_series(1, 5000) g", fieldCount: 1) {
                _ in
                calls += 1
                if calls == 10 { throw Enough() }
            }
        }
        #expect(calls == 10)
        #expect(connection.isIdle)
        #expect(try connection.execute("SELECT 3").string(0, 0) == "3")
    }

    /// Settings sent with a COPY hold inside it and are gone after it; one PostgreSQL refuses is
    /// its error, and the connection stays usable.
    @Test func settingsHoldForTheCopyAloneAndABadOneIsTheServersError() throws {
        let connection = try Cluster.connect()
        let settings = [PostgresSetting("enable_sort", "off"), PostgresSetting("random_page_cost", "1.5")]
        var seen: [String] = []
        try connection.copyOutBinary(
            query: "SELECT current_setting('enable_sort') || ' ' || current_setting('random_page_cost')",
            fieldCount: 1, settings: settings
        ) { row in
            seen.append(String(decoding: row.next()!, as: UTF8.self))
        }
        #expect(seen == ["off 1.5"])
        // Gone with the COPY's implicit transaction.
        #expect(try connection.execute("SHOW enable_sort").string(0, 0) == "on")
        #expect(try connection.execute("SHOW random_page_cost").string(0, 0) == "4")
        _ = expectPostgresError(sqlState: "22023") {
            try connection.copyOutBinary(
                query: "SELECT 1::bigint", fieldCount: 1, settings: [PostgresSetting("enable_sort", "maybe")]
            ) { _ in Issue.record("a row after a failed setting") }
        }
        #expect(connection.isIdle)
        #expect(try connection.execute("SHOW enable_sort").string(0, 0) == "on")
        #expect(PostgresSetting("enable_sort", "off").setLocal == "SET LOCAL enable_sort = off")
    }

    /// A literal reads back as the value a parameter gives: doubles bit for bit (the infinities,
    /// NaN, -0.0), times to the microsecond, integers at their bounds.
    @Test func sqlLiteralsReadBackAsTheirParameters() throws {
        let connection = try Cluster.connect()
        var random = SystemRandomNumberGenerator()
        #expect(PostgresValue.sqlLiteral(nil) == "NULL")
        var values: [PostgresValue] = [
            .bool(true), .bool(false), .int64(.min), .int64(.max), .int64(0), .int64(-5),
            .double(.nan), .double(.infinity), .double(-.infinity), .double(-0.0),
            .double(.leastNonzeroMagnitude), .double(.greatestFiniteMagnitude), .double(52.520008),
        ]
        values += timestampSamples.filter { $0 >= -62_135_596_800_000_000 }.map { .timestamp(micros: $0) }
        for _ in 0..<200 { values.append(.double(Double(bitPattern: random.next()))) }
        for value in values {
            let literal = PostgresValue.sqlLiteral(value)
            let result = try connection.execute(
                "SELECT \(literal) IS NOT DISTINCT FROM $1, \(literal)::text, $1::text", [value])
            let same = try result.bool(0, 0)
            // NaN equals NaN in PostgreSQL; -0.0 equals 0.0, so the text tells them apart.
            #expect(same == true && result.string(0, 1) == result.string(0, 2), "\(literal)")
        }
    }
}

/// The reader's rules (PostgresCopyOut.swift) on bytes made here, as a server could never send them.
@Suite struct CopyOutReaderTests {
    static let header: [UInt8] = PostgresConnection.copySignature + [0, 0, 0, 0, 0, 0, 0, 0]

    private func tuple(_ fields: [[UInt8]?]) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(fields.count >> 8), UInt8(fields.count & 0xFF)]
        for field in fields {
            guard let field else {
                bytes += [0xFF, 0xFF, 0xFF, 0xFF]
                continue
            }
            let count = UInt32(field.count)
            bytes += [
                UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count & 0xFF),
            ]
            bytes += field
        }
        return bytes
    }

    private let trailer: [UInt8] = [0xFF, 0xFF]

    /// Reads `messages` as one COPY's data; the fields of each row, or the error.
    private func read(_ messages: [[UInt8]], fieldCount: Int = 2) -> Result<[[[UInt8]?]], PostgresError> {
        var reader = CopyOutReader(fieldCount: fieldCount)
        var rows: [[[UInt8]?]] = []
        do {
            for message in messages {
                try message.withUnsafeBytes { bytes in
                    try reader.read(bytes) { row in
                        rows.append((0..<fieldCount).map { _ in row.next().map(Array.init) })
                    }
                }
            }
            guard reader.ended else { return .failure(CopyOutReader.malformed("no trailer")) }
            return .success(rows)
        } catch {
            return .failure(error as! PostgresError)
        }
    }

    @Test func theHeaderComesWithTheFirstTupleThenOneTupleAMessage() throws {
        let rows = try read([
            Self.header + tuple([[1, 2], nil]), tuple([[], [7]]), trailer,
        ]).get()
        #expect(rows == [[[1, 2], nil], [[], [7]]])
        #expect(try read([Self.header + trailer]).get().isEmpty)
        // A header extension is skipped.
        var extended = PostgresConnection.copySignature + [0, 0, 0, 0, 0, 0, 0, 3, 9, 9, 9]
        extended += tuple([[5], [6]])
        #expect(try read([extended, trailer]).get() == [[[5], [6]]])
    }

    @Test func everyBrokenRuleIsADecodeError() {
        let broken: [(String, [[UInt8]])] = [
            ("no signature", [Array("PGCOPY\n".utf8) + [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] + trailer]),
            ("OIDs flagged", [PostgresConnection.copySignature + [0, 1, 0, 0, 0, 0, 0, 0] + trailer]),
            ("an extension past the message", [PostgresConnection.copySignature + [0, 0, 0, 0, 0, 0, 0, 9]]),
            ("another field count", [Self.header + tuple([[1], [2], [3]]), trailer]),
            ("a field past the message", [Self.header + Array(tuple([[1], [2, 3]]).dropLast()), trailer]),
            ("bytes after the last field", [Self.header + tuple([[1], [2]]) + [0], trailer]),
            ("a negative length", [Self.header + [0, 2, 0xFF, 0xFF, 0xFF, 0xFE, 0, 0, 0, 0], trailer]),
            ("a message without a field count", [Self.header + [0], trailer]),
            ("data after the trailer", [Self.header + trailer, tuple([[1], [2]])]),
            ("the trailer with data", [Self.header + trailer + [0]]),
            ("no trailer", [Self.header + tuple([[1], [2]])]),
        ]
        for (rule, messages) in broken {
            switch read(messages) {
            case .success: Issue.record("\(rule): read as valid")
            case .failure(let error): #expect(error.kind == .decode, "\(rule): \(error)")
            }
        }
    }
}
