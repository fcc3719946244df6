import Foundation
import JSON
import Postgres
import Testing

/// The binary COPY encoder, byte for byte, and against the text COPY on a real server.
@Suite struct BinaryCopyEncodingTests {
    private func field(_ write: (inout BinaryCopyRows) throws -> Void) rethrows -> [UInt8] {
        var rows = BinaryCopyRows(writeHeader: false)
        try write(&rows)
        return rows.bytes
    }

    @Test func theHeaderAndTrailerAreTheDocumentedBytes() {
        var rows = BinaryCopyRows()
        rows.appendTrailer()
        #expect(
            rows.bytes == Array("PGCOPY\n".utf8) + [
                0xFF, 0x0D, 0x0A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF,
            ])
        #expect(field { $0.beginRow(fieldCount: 15) } == [0x00, 0x0F])
    }

    @Test func eachTypeHasItsWidthAndBigEndianValue() throws {
        #expect(field { $0.null() } == [0xFF, 0xFF, 0xFF, 0xFF])
        #expect(field { $0.int64(-2) } == [0, 0, 0, 8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE])
        #expect(field { $0.int64(0x0102_0304_0506_0708) } == [0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])
        #expect(field { $0.int32(0x0102_0304) } == [0, 0, 0, 4, 1, 2, 3, 4])
        #expect(field { $0.int16(100) } == [0, 0, 0, 2, 0, 100])
        #expect(field { $0.bool(true) } == [0, 0, 0, 1, 1])
        #expect(field { $0.bool(false) } == [0, 0, 0, 1, 0])
        #expect(field { $0.float8(1.0) } == [0, 0, 0, 8, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0])
        #expect(field { $0.float8(-0.0) } == [0, 0, 0, 8, 0x80, 0, 0, 0, 0, 0, 0, 0])
        #expect(field { $0.float8(.infinity) } == [0, 0, 0, 8, 0x7F, 0xF0, 0, 0, 0, 0, 0, 0])
        #expect(field { $0.float8(-.infinity) } == [0, 0, 0, 8, 0xFF, 0xF0, 0, 0, 0, 0, 0, 0])
        #expect(field { $0.float8(.nan) } == [0, 0, 0, 8, 0x7F, 0xF8, 0, 0, 0, 0, 0, 0])
        #expect(try field { try $0.text("é") } == [0, 0, 0, 2, 0xC3, 0xA9])
        #expect(try field { try $0.text("") } == [0, 0, 0, 0])
        let uuid: [UInt8] = [
            0, 0, 0, 16, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD,
            0xEE, 0xFF,
        ]
        #expect(field { $0.uuid(high: 0x0011_2233_4455_6677, low: 0x8899_AABB_CCDD_EEFF) } == uuid)
    }

    @Test func timestampsCountFromTheYear2000AndAnOverflowIsRejectedNotInfinite() {
        // 2000-01-01 00:00:00 UTC is 0; one microsecond before is -1.
        #expect(field { $0.timestamp(micros: 946_684_800_000_000) } == [0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0])
        #expect(
            field { $0.timestamp(micros: 946_684_799_999_999) } == [0, 0, 0, 8]
                + [UInt8](repeating: 0xFF, count: 8))
        // Int64.min would be -infinity: an overflowing time becomes the next value, out of range.
        #expect(field { $0.timestamp(micros: .min) } == [0, 0, 0, 8, 0x80, 0, 0, 0, 0, 0, 0, 1])
    }

    @Test func aNulInTextIsRefusedAsTheTextFormRefusesIt() {
        var rows = BinaryCopyRows(writeHeader: false)
        #expect(throws: PostgresError.self) { try rows.text("a\u{0}b") }
    }
}

extension PostgresTests {
    /// The same rows through the text COPY and the binary COPY read back equal, awkward values included.
    @Test func binaryCopyStoresWhatTheTextCopyStores() throws {
        let connection = try Cluster.connect()
        let definition =
            "(id bigint PRIMARY KEY, i integer, s smallint, d float8, b bool, ts timestamptz, t text, u uuid)"
        let text = uniqueTable("copytext")
        let binary = uniqueTable("copybinary")
        try connection.executeScript(
            "CREATE TABLE \(text) \(definition); CREATE TABLE \(binary) \(definition)")
        let doubles: [Double?] = [
            0, -0.0, 1.5, .nan, .infinity, -.infinity, .greatestFiniteMagnitude, nil, 1e-300,
        ]
        let times: [Int64?] = [
            0, -1, 946_684_800_000_000, -62_135_596_800_000_000, 253_402_300_799_999_999,
            -210_000_000_000_000_000,
            1_700_000_000_123_456, nil, Int64.max,
        ]
        struct Row {
            var id: Int64, i: Int32?, s: Int16?, d: Double?, b: Bool?, ts: Int64?, t: String?,
                u: (UInt64, UInt64)?
        }
        var rows: [Row] = []
        for index in 0..<200 {
            let i: Int32? = index % 4 == 0 ? nil : Int32(index * 1000 - 70_000)
            let small: Int16? = index % 5 == 0 ? nil : Int16(index - 100)
            let b: Bool? = index % 3 == 0 ? nil : index % 2 == 0
            let t: String? = index % 6 == 0 ? nil : awkwardTexts[index % awkwardTexts.count]
            let u: (UInt64, UInt64)? = index % 7 == 0 ? nil : (UInt64(index) << 40 | 0xABCD, ~UInt64(index))
            rows.append(
                Row(
                    id: Int64(index), i: i, s: small, d: doubles[index % doubles.count], b: b,
                    ts: times[index % times.count], t: t, u: u))
        }
        let columns = ["id", "i", "s", "d", "b", "ts", "t", "u"]
        func uuidText(_ u: (UInt64, UInt64)) -> String {
            let hex = String(u.0, radix: 16).leftPadded(16) + String(u.1, radix: 16).leftPadded(16)
            let h = Array(hex)
            let parts: [String] = [
                String(h[0..<8]), String(h[8..<12]), String(h[12..<16]), String(h[16..<20]),
                String(h[20..<32]),
            ]
            return parts.joined(separator: "-")
        }
        try connection.copyIn(
            table: text, columns: columns,
            rows: rows.map { row -> [PostgresValue?] in
                var values: [PostgresValue?] = [.int64(row.id), row.i.map { .int64(Int64($0)) }]
                values.append(row.s.map { .int64(Int64($0)) })
                values.append(row.d.map { .double($0) })
                values.append(row.b.map { .bool($0) })
                values.append(row.ts.map { .timestamp(micros: $0) })
                values.append(row.t.map { .text($0) })
                values.append(row.u.map { .text(uuidText($0)) })
                return values
            })
        let copied = try connection.copyInBinary(table: binary, columns: columns, rows: rows) {
            (row: Row, out: inout BinaryCopyRows) throws(PostgresError) in
            out.beginRow(fieldCount: 8)
            out.int64(row.id)
            if let v = row.i { out.int32(v) } else { out.null() }
            if let v = row.s { out.int16(v) } else { out.null() }
            if let v = row.d { out.float8(v) } else { out.null() }
            if let v = row.b { out.bool(v) } else { out.null() }
            if let v = row.ts { out.timestamp(micros: v) } else { out.null() }
            if let v = row.t { try out.text(v) } else { out.null() }
            if let v = row.u { out.uuid(high: v.0, low: v.1) } else { out.null() }
        }
        #expect(copied == rows.count)
        // float8 compared by text: NaN = NaN there, and -0 keeps its sign.
        let differences = try connection.execute(
            """
            SELECT count(*) FROM (
                (SELECT id, i, s, d::text, b, ts, t, u FROM \(text) EXCEPT ALL SELECT id, i, s, d::text, b, ts, t, u FROM \(binary))
                UNION ALL
                (SELECT id, i, s, d::text, b, ts, t, u FROM \(binary) EXCEPT ALL SELECT id, i, s, d::text, b, ts, t, u FROM \(text))
            ) x
            """)
        #expect(try differences.int64(0, 0) == 0)
        #expect(try connection.execute("SELECT count(*) FROM \(binary) WHERE d = 'NaN'").int64(0, 0) == 22)
    }

    /// A time PostgreSQL cannot hold is refused by both forms, and nothing is stored.
    @Test func aTimestampOutOfRangeIsRejectedByBothForms() throws {
        let connection = try Cluster.connect()
        let table = uniqueTable("copyrange")
        try connection.executeScript("CREATE TABLE \(table) (ts timestamptz)")
        for micros in [Int64.min, Int64.min + 1, -300_000_000_000_000_000] {
            _ = expectPostgresError(kind: .copy) {
                try connection.copyIn(table: table, columns: ["ts"], rows: [[.timestamp(micros: micros)]])
            }
            _ = expectPostgresError(kind: .copy) {
                try connection.copyInBinary(table: table, columns: ["ts"], rows: [micros]) { micros, out in
                    out.beginRow(fieldCount: 1)
                    out.timestamp(micros: micros)
                }
            }
        }
        #expect(try connection.execute("SELECT count(*) FROM \(table)").int64(0, 0) == 0)
    }

    /// The one calendar (JSON's CivilCalendar), which the projector names partitions by, agrees with
    /// PostgreSQL's timestamp text.
    @Test func civilDateAgreesWithTheTimestampText() {
        var generator = SystemRandomNumberGenerator()
        let edges: [Int64] = [
            0, -1, 1, 951_782_400_000_000 - 1, 951_782_400_000_000, 4_107_542_400_000_000,
            -62_135_596_800_000_000,
            -62_135_596_800_000_000 - 1, 253_402_300_799_999_999, -2_208_988_800_000_000, Int64.max,
        ]
        let randomTimes = (0..<100_000).map { index -> Int64 in
            index % 2 == 0
                ? Int64.random(in: -62_135_596_800_000_000...253_402_300_799_999_999, using: &generator)
                : Int64.random(in: -5_000_000_000_000_000...5_000_000_000_000_000, using: &generator)
        }
        for micros in edges + randomTimes {
            let text = Array(PostgresTimestamp.text(micros: micros).utf8)
            let dash = text.firstIndex(of: UInt8(ascii: "-"))!
            var year = Int64(String(decoding: text[..<dash], as: UTF8.self))!
            let month = Int64(String(decoding: text[(dash + 1)..<(dash + 3)], as: UTF8.self))!
            let day = Int64(String(decoding: text[(dash + 4)..<(dash + 6)], as: UTF8.self))!
            if text.suffix(3) == Array(" BC".utf8) { year = 1 - year }
            let days = CivilCalendar.floorDivide(micros, 86_400_000_000).quotient
            let date = CivilCalendar.date(days: days)
            #expect(
                Int64(date.year) == year && Int64(date.month) == month && Int64(date.day) == day, "\(micros)")
            if date.year != year || date.month != month { break }
        }
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
