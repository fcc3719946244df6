import Clients
import Ingest
import Testing

/// Random Overland bodies, valid and not: whenever `OverlandDecoder.decodeDirect` answers, its
/// answer must be `decodeTree`'s (fixes, skips, rejections with their codes and messages), and a
/// body of the plain shape (valid JSON, ASCII names, no repeated name, scalars where a fix is
/// read) must take the direct path. The values mix every JSON type, numbers at the edges of the
/// grammar and of a double's range, escaped and non-ASCII strings, bad literals, whitespace between
/// any two tokens, unknown and repeated names.
@Suite struct OverlandDirectFuzzTests {
    let limits = IngestLimits()

    /// SplitMix64: the same bodies on every run.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let propertyNames = [
        "timestamp", "altitude", "speed", "course", "horizontal_accuracy", "vertical_accuracy",
        "speed_accuracy", "course_accuracy", "motion", "device_id", "wifi", "battery_state",
        "battery_level", "action", "type", "arrival_date", "departure_date", "pauses", "activity",
        "desired_accuracy", "deferred", "significant_change", "locations_in_payload", "mode", "start",
        "end", "distance", "duration", "steps", "start_location", "end_location", "stopped_automatically",
        "unique_id", "x", "speeds", "spee", "Speed", "timestampx", "geometry", "properties", "coordinates",
    ]

    static let validScalars = [
        "0", "-1", "12.5", "-0", "1e3", "1E-2", "-12.75e+1", "360", "359.6", "0.81", "81", "-0.5",
        "123456789012345678901234567890", "9007199254740993", "1e308", "2.5e-320", "true", "false", "null",
        #""2026-12-01T08:00:00Z""#, #""2026-12-01T09:00:00+0100""#, #""2026-12-01T09:00:00.5+01""#,
        #""2026-12-01T09:00:00+01:00""#, #""2026-12-01T08:00:00""#, #""2026-02-30T08:00:00Z""#,
        #""visit""#, #""trip""#, #""charging""#, #""full""#, #""unplugged""#, #""unknown""#, #""""#,
        #""caf\u00e9""#, #""ü""#, #""a\"b""#, #""vis\u0069t""#, #""2026-12-01T08:00:00\u005a""#,
    ]

    static let invalidScalars = [
        "01", "-", "2.", "1e", "1e400", "-1e999", "+1", ".5", "nul", "tru", "NaN", "Infinity",
        "\"bad\u{01}\"", "\"open", #""\x""#, #""\ud800""#, "\"\u{FF}\"",
    ]

    struct Body {
        var rng: Generator
        let valid: Bool

        mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &rng) < percent }

        mutating func space() -> String {
            guard chance(valid ? 5 : 8) else { return "" }
            return [" ", "\n", "\t", "\r\n  "].randomElement(using: &rng)!
        }

        mutating func scalar() -> String {
            if !valid && chance(3) {
                return OverlandDirectFuzzTests.invalidScalars.randomElement(using: &rng)!
            }
            return OverlandDirectFuzzTests.validScalars.randomElement(using: &rng)!
        }

        mutating func value(depth: Int) -> String {
            let roll = Int.random(in: 0..<100, using: &rng)
            if depth > 6 || roll < 75 { return scalar() }
            if roll < 88 {
                let count = Int.random(in: 0...3, using: &rng)
                return "[" + space()
                    + (0..<count).map { _ in value(depth: depth + 1) }.joined(separator: "," + space())
                    + space() + "]"
            }
            return object(names: ["a", "b", "mode", "type", "coordinates"], members: 0...3, depth: depth + 1)
            {
                $0.value(depth: depth + 1)
            }
        }

        /// An object of `members` members named from `names` (a repeat only in invalid bodies).
        mutating func object(
            names: [String], members: ClosedRange<Int>, depth: Int, _ value: (inout Body) -> String
        ) -> String {
            var used: Set<String> = []
            var parts: [String] = []
            for _ in 0..<Int.random(in: members, using: &rng) {
                var name = names.randomElement(using: &rng)!
                if used.contains(name) && (valid || !chance(30)) { continue }
                if !valid && chance(2) {
                    name = ["\\u0061ction", "ünï", "sp\"eed"].randomElement(using: &rng)!
                }
                used.insert(name)
                parts.append(space() + "\"" + name + "\"" + space() + ":" + space() + value(&self) + space())
            }
            return "{" + parts.joined(separator: ",") + "}"
        }

        mutating func geometry() -> String {
            if chance(3) { return value(depth: 4) }
            return object(names: ["type", "coordinates", "bbox"], members: 1...3, depth: 4) { body in
                guard body.chance(85) else { return body.value(depth: 4) }
                let count = [2, 2, 2, 2, 3, 1, 0].randomElement(using: &body.rng)!
                return "["
                    + (0..<count).map { _ in
                        body.chance(90) ? "13.4\(Int.random(in: 0...99, using: &body.rng))" : body.scalar()
                    }
                    .joined(separator: ",") + "]"
            }
        }

        mutating func feature() -> String {
            if chance(2) { return value(depth: 3) }
            return object(names: ["type", "geometry", "properties", "id"], members: 1...4, depth: 3) { body in
                switch Int.random(in: 0..<3, using: &body.rng) {
                case 0: return body.geometry()
                case 1:
                    if body.chance(3) { return body.value(depth: 4) }
                    return body.object(
                        names: OverlandDirectFuzzTests.propertyNames, members: 0...16, depth: 4
                    ) {
                        $0.value(depth: 4)
                    }
                default: return body.value(depth: 4)
                }
            }
        }

        mutating func document() -> String {
            let count = Int.random(in: 0...6, using: &rng)
            let locations =
                "[" + space() + (0..<count).map { _ in feature() }.joined(separator: "," + space()) + space()
                + "]"
            var members = [space() + "\"locations\":" + space() + locations]
            if chance(30) { members.append("\"current\":" + feature()) }
            if chance(20) { members.append("\"trip\":{\"mode\":\"walk\",\"distance\":812.3}") }
            members.shuffle(using: &rng)
            return space() + "{" + members.joined(separator: ",") + "}" + space()
        }
    }

    @Test func randomBodiesAgreeWithTheTree() {
        var answered = 0
        for seed in 0..<4_000 {
            var body = Body(rng: Generator(state: UInt64(seed)), valid: seed % 2 == 0)
            let bytes = Array(body.document().utf8)
            guard let direct = OverlandDecoder.decodeDirect(bytes, limits: limits) else { continue }
            answered += 1
            let tree = try? OverlandDecoder.decodeTree(bytes, limits: limits)
            #expect(tree == direct, "seed \(seed): \(String(decoding: bytes.prefix(300), as: UTF8.self))")
        }
        // Most bodies, valid or not, are answered directly: the comparison above is not vacuous.
        #expect(answered > 800)
    }

    /// Valid bodies take the direct path unless they hold a container where a fix is read (left
    /// to the tree; the generator puts one in about two bodies of three): a share of them must.
    @Test func validBodiesMostlyTakeTheDirectPath() {
        var accepted = 0
        var direct = 0
        for seed in 10_000..<11_000 {
            var body = Body(rng: Generator(state: UInt64(seed)), valid: true)
            let bytes = Array(body.document().utf8)
            guard (try? OverlandDecoder.decodeTree(bytes, limits: limits)) != nil else { continue }
            accepted += 1
            if OverlandDecoder.decodeDirect(bytes, limits: limits) != nil { direct += 1 }
        }
        #expect(accepted > 500 && direct * 5 > accepted, "\(direct) of \(accepted) read directly")
    }
}
