import Postgres
import Testing

/// Parameters go in binary (all but text): every value arrives exactly as it was, the awkward ones
/// included, and arrays keep their NULLs, their order and their element type.
extension PostgresTests {
    @Test func scalarParametersArriveBitForBit() throws {
        let connection = try Cluster.connect()
        // The server's binary send of the parameter against its send of the same value parsed
        // from SQL: equal bytes, so -0, NaN, the extremes and sub-microsecond-free times are exact.
        let samples: [(PostgresValue, String, String)] = [
            (.int64(.min), "int8send", "'-9223372036854775808'::int8"),
            (.int64(.max), "int8send", "'9223372036854775807'::int8"), (.int64(-2), "int8send", "'-2'::int8"),
            (.double(-0.0), "float8send", "'-0'::float8"), (.double(.nan), "float8send", "'NaN'::float8"),
            (.double(-.infinity), "float8send", "'-Infinity'::float8"),
            (.double(0.1), "float8send", "'0.1'::float8"),
            (.double(.leastNonzeroMagnitude), "float8send", "'4.9406564584124654e-324'::float8"),
            (.bool(true), "boolsend", "true"), (.bool(false), "boolsend", "false"),
            (
                .timestamp(micros: 1_700_000_000_123_456), "timestamptz_send",
                "'2023-11-14 22:13:20.123456+00'::timestamptz"
            ),
            (
                .timestamp(micros: -62_135_596_800_000_001), "timestamptz_send",
                "'0001-12-31 23:59:59.999999+00 BC'::timestamptz"
            ),
            (
                .uuid(high: 0x0011_2233_4455_6677, low: 0x8899_AABB_CCDD_EEFF), "uuid_send",
                "'00112233-4455-6677-8899-aabbccddeeff'::uuid"
            ),
            (.bytes([0, 0x5C, 0xFF]), "byteasend", "'\\x005cff'::bytea"),
        ]
        for (value, send, literal) in samples {
            let result = try connection.execute("SELECT \(send)($1) = \(send)(\(literal))", [value])
            #expect(result.string(0, 0) == "t", "\(value) against \(literal)")
        }
    }

    @Test func arrayParametersArriveExactlyInBinaryWithNullsAndEmpty() throws {
        let connection = try Cluster.connect()
        let arrays: [(PostgresValue, String)] = [
            (.int64Array([1, nil, -3, .max]), "ARRAY[1, NULL, -3, 9223372036854775807]::bigint[]"),
            (.int64Array([]), "'{}'::bigint[]"),
            (
                .array(PostgresArray(.integer, [.int64(7), nil, .int64(-2_147_483_648)])),
                "ARRAY[7, NULL, -2147483648]::integer[]"
            ),
            (.array(PostgresArray(.smallint, [.int64(100), .int64(-1)])), "ARRAY[100, -1]::smallint[]"),
            (
                .array(PostgresArray(.float8, [.double(0.5), nil, .double(.nan)])),
                "ARRAY[0.5, NULL, 'NaN']::float8[]"
            ),
            (.array(PostgresArray(.boolean, [.bool(true), nil])), "ARRAY[true, NULL]::boolean[]"),
            (
                .timestampArray(micros: [0, nil, 1_700_000_000_123_456]),
                "ARRAY['1970-01-01 00:00:00+00', NULL, '2023-11-14 22:13:20.123456+00']::timestamptz[]"
            ),
        ]
        for (value, literal) in arrays where literal != "NULL" {
            let result = try connection.execute("SELECT $1 IS NOT DISTINCT FROM \(literal)", [value])
            #expect(result.string(0, 0) == "t", "\(value) against \(literal)")
        }
        let texts = try connection.execute(
            "SELECT t FROM unnest($1::text[]) WITH ORDINALITY AS u (t, n) ORDER BY n",
            [.textArray(awkwardTexts + [nil])])
        #expect((0..<texts.rowCount).map { texts.string($0, 0) } == awkwardTexts + [nil])
    }

    @Test func aNulInATextArrayIsRefusedBeforeSending() throws {
        let connection = try Cluster.connect()
        _ = expectPostgresError(kind: .parameter) {
            try connection.execute("SELECT $1::text[]", [.textArray(["a\u{0}b"])])
        }
        #expect(try connection.execute("SELECT 1").int64(0, 0) == 1)
    }
}
