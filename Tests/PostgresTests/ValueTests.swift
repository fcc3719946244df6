import Foundation
import Postgres
import Synchronization
import Testing

@Suite(.serialized, EmbeddedClusterTrait())
struct PostgresTests {}

let timestampSamples: [Int64] = [
    0, 1, -1, 999_999, 1_700_000_000_123_456, (1 << 53) + 1,
    253_402_300_799_999_999,  // 9999-12-31 23:59:59.999999
    -62_135_596_800_000_000,  // 0001-01-01
    -62_135_596_800_000_001,  // 1 BC, the last microsecond
    -86_400_000_000 * 365 * 100 + 7,
]

@Test(arguments: timestampSamples)
func timestampTextRoundTripsWithoutAServer(micros: Int64) {
    let text = PostgresTimestamp.text(micros: micros)
    #expect(PostgresTimestamp.micros(text: text) == micros, "\(text)")
}

@Test func timestampTextReadsServerAndRFC3339Forms() {
    #expect(PostgresTimestamp.text(micros: 1_700_000_000_123_456) == "2023-11-14 22:13:20.123456+00")
    #expect(PostgresTimestamp.micros(text: "2023-11-14 22:13:20.5+00") == 1_700_000_000_500_000)
    #expect(PostgresTimestamp.micros(text: "2023-11-15T00:13:20+02:00") == 1_700_000_000_000_000)
    #expect(PostgresTimestamp.micros(text: "2023-11-14T22:13:20Z") == 1_700_000_000_000_000)
    #expect(PostgresTimestamp.micros(text: "0001-12-31 23:59:59.999999+00 BC") == -62_135_596_800_000_001)
    for bad in [
        "infinity", "2023-13-01 00:00:00+00", "2023-11-14 22:13:20.1234567+00", "2023-11-14 22:13:20",
    ] {
        #expect(PostgresTimestamp.micros(text: bad) == nil, "\(bad)")
    }
}

@Test func arrayLiteralsQuoteTextAndSpellSpecialValues() {
    #expect(PostgresValue.int64Array([1, nil, -3]).textForm == "{1,NULL,-3}")
    #expect(
        PostgresValue.array(PostgresArray(.float8, [.double(.nan), .double(-.infinity), .double(0.5)]))
            .textForm
            == "{NaN,-Infinity,0.5}")
    #expect(
        PostgresValue.textArray(["a\"b\\c", nil, "NULL"]).textForm == #"{"a\"b\\c",NULL,"NULL"}"#)
    #expect(PostgresValue.array(PostgresArray(.boolean, [.bool(true), .bool(false)])).textForm == "{t,f}")
    #expect(
        PostgresValue.uuid(high: 0x0011_2233_4455_6677, low: 0x8899_AABB_CCDD_EEFF).textForm
            == "00112233-4455-6677-8899-aabbccddeeff")
}

@Test func aLongDataDirectoryPutsTheSocketUnderTmpAndSaysSo() throws {
    let long = "/var/lib/" + String(repeating: "findmy-data-directory-", count: 5)
    let notes = LogLines()
    var configuration = EmbeddedPostgres.Configuration(dataDirectory: long)
    configuration.log = { line in notes.append(line) }
    let cluster = try EmbeddedPostgres(configuration)
    #expect(cluster.socketDirectory.hasPrefix("/tmp/findmy-pg-"))
    #expect(cluster.conninfo.contains(cluster.socketDirectory))
    #expect(notes.lines.contains { $0.contains("107-byte limit") })
    let again = try EmbeddedPostgres(configuration)
    #expect(again.socketDirectory == cluster.socketDirectory)
}

final class LogLines: Sendable {
    private let storage = Mutex<[String]>([])
    func append(_ line: String) { storage.withLock { $0.append(line) } }
    var lines: [String] { storage.withLock { $0 } }
}

extension PostgresTests {
    @Test func everyTypeRoundTripsThroughParameters() throws {
        let connection = try Cluster.connect()
        for text in awkwardTexts {
            #expect(try connection.execute("SELECT $1::text", [.text(text)]).string(0, 0) == text)
        }
        for value in [Int64.min, -1, 0, 1, Int64.max] {
            #expect(try connection.execute("SELECT $1", [.int64(value)]).int64(0, 0) == value)
        }
        for value in [
            0.1, -0.0, 1e-300, .leastNonzeroMagnitude, .greatestFiniteMagnitude, .infinity, -.infinity,
            1.0 / 3,
        ] {
            let back = try connection.execute("SELECT $1", [.double(value)]).double(0, 0)
            #expect(back == value && back?.sign == value.sign, "\(value)")
        }
        #expect(try connection.execute("SELECT $1", [.double(.nan)]).double(0, 0)?.isNaN == true)
        for value in [true, false] {
            #expect(try connection.execute("SELECT $1", [.bool(value)]).bool(0, 0) == value)
        }
        for bytes in [[], [0], Array(0...255), Array("\\x41\n\t".utf8)] as [[UInt8]] {
            let result = try connection.execute("SELECT $1, octet_length($1)", [.bytes(bytes)])
            #expect(try result.bytes(0, 0) == bytes)
            #expect(try result.int64(0, 1) == Int64(bytes.count))
        }
        let nulls = try connection.execute(
            "SELECT $1::text AS t, $2::int8 AS i, $3::float8 AS d, $4::bool AS b, $5::bytea AS y, $6::timestamptz AS ts",
            [nil, nil, nil, nil, nil, nil])
        #expect(nulls.columnNames == ["t", "i", "d", "b", "y", "ts"])
        for column in nulls.columnNames { #expect(nulls.isNull(0, column)) }
        #expect(nulls.string(0, "t") == nil)
        #expect(
            try nulls.int64(0, "i") == nil && nulls.bytes(0, "y") == nil
                && nulls.timestampMicros(0, "ts") == nil)
    }

    @Test func timestampsRoundTripExactlyToTheMicrosecond() throws {
        let connection = try Cluster.connect()
        for micros in timestampSamples {
            let result = try connection.execute(
                "SELECT $1::timestamptz, (extract(epoch from $1::timestamptz) * 1000000)::bigint",
                [.timestamp(micros: micros)])
            #expect(try result.timestampMicros(0, 0) == micros)
            #expect(try result.int64(0, 1) == micros)
        }
        // Whatever the session's time zone, the instant is the same.
        try connection.executeScript("SET TimeZone = 'Asia/Kolkata'")
        let shifted = try connection.execute("SELECT $1", [.timestamp(micros: 1_700_000_000_123_456)])
        #expect(shifted.string(0, 0)?.hasSuffix("+05:30") == true)
        #expect(try shifted.timestampMicros(0, 0) == 1_700_000_000_123_456)
    }

    @Test func aWrongTypeIsADecodeErrorAndANulInTextIsRefusedBeforeSending() throws {
        let connection = try Cluster.connect()
        let result = try connection.execute("SELECT 'abc'::text")
        _ = expectPostgresError(kind: .decode) { _ = try result.int64(0, 0) }
        _ = expectPostgresError(kind: .parameter) {
            try connection.execute("SELECT $1::text", [.text("a\u{0}b")])
        }
        #expect(try connection.execute("SELECT 1").int64(0, 0) == 1)
    }
}

extension PostgresTests {
    /// The binary accessors read exactly what was stored: every double bit for bit (a latitude like
    /// 52.520008 and the awkward ones), every timestamp to the microsecond, text unchanged.
    @Test func binaryFormatReadsEveryValueExactly() throws {
        let connection = try Cluster.connect()
        for value in [
            52.520008, 13.404954, -33.868820, 0.1 + 0.2, -0.0, 12, 1e-300, .leastNonzeroMagnitude,
            .greatestFiniteMagnitude, 1.0 / 3,
        ] {
            let back = try connection.execute("SELECT $1::float8", [.double(value)], format: .binary)
                .binaryDouble(0, 0)
            #expect(back?.bitPattern == value.bitPattern, "\(value)")
        }
        for micros in timestampSamples {
            let result = try connection.execute(
                "SELECT $1::timestamptz", [.timestamp(micros: micros)], format: .binary)
            #expect(try result.binaryTimestampMicros(0, 0) == micros)
        }
        for value in [Int64.min, -1, 0, 1, Int64.max] {
            #expect(
                try connection.execute("SELECT $1::int8", [.int64(value)], format: .binary).binaryInt64(0, 0)
                    == value)
        }
        let small = try connection.execute("SELECT 81::smallint, (-7)::integer, true, false", format: .binary)
        #expect(try small.binaryInt64(0, 0) == 81 && small.binaryInt64(0, 1) == -7)
        #expect(try small.binaryBool(0, 2) == true && small.binaryBool(0, 3) == false)
        for text in awkwardTexts {
            let result = try connection.execute("SELECT $1::text", [.text(text)], format: .binary)
            #expect(try result.withBinaryText(0, 0) { String(decoding: $0, as: UTF8.self) } == text)
        }
        let nulls = try connection.execute(
            "SELECT NULL::float8, NULL::timestamptz, NULL::int8, NULL::bool, NULL::text", format: .binary)
        #expect(try nulls.binaryDouble(0, 0) == nil && nulls.binaryTimestampMicros(0, 1) == nil)
        #expect(try nulls.binaryInt64(0, 2) == nil && nulls.binaryBool(0, 3) == nil)
        #expect(try nulls.withBinaryText(0, 4) { _ in true } == nil)
        // Another type than asked, or infinity, is a decode error, not a wrong number.
        let others = try connection.execute(
            "SELECT 1.5::float4, 'infinity'::timestamptz, 'x'::varchar, now()::timestamp", format: .binary)
        _ = expectPostgresError(kind: .decode) { _ = try others.binaryDouble(0, 0) }
        _ = expectPostgresError(kind: .decode) { _ = try others.binaryTimestampMicros(0, 1) }
        _ = expectPostgresError(kind: .decode) { _ = try others.withBinaryText(0, 2) { _ in 0 } }
        _ = expectPostgresError(kind: .decode) { _ = try others.binaryTimestampMicros(0, 3) }
    }
}
