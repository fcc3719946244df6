import Testing

@testable import Clients

/// Random OwnTracks messages, valid and not: whenever `OwnTracks.decodeDirect` answers, its answer
/// must be the tree path's (the fix, or the rejection with its code and message), and a plain
/// `location` message (valid JSON, ASCII names, none repeated, scalars where a fix is read) must
/// take the direct path. Values mix every JSON type, numbers at the edges of the grammar and of a
/// double's range, numbers as strings (GPSLogger), escaped and non-ASCII strings, bad literals,
/// whitespace between any two tokens, unknown and repeated names, nested values.
@Suite struct OwnTracksDirectFuzzTests {
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

    static let names = [
        "lat", "lon", "tst", "acc", "alt", "vel", "cog", "batt", "bs", "t", "tid", "_id", "topic",
        "created_at", "m", "conn", "vac", "inregions", "SSID", "p", "Lat", "ts", "battx", "",
    ]

    static let validScalars = [
        "0", "-1", "12.5", "-0", "1e3", "1E-2", "52.52", "13.405", "-91", "181", "1764756000",
        "1764756000.25", "1764756000000", "31536000", "100", "101", "2", "3", "7", "360", "359.6",
        "123456789012345678901234567890", "1e308", "2.5e-320", "true", "false", "null", #""""#,
        #"" 52.5 ""#, #""13.4""#, #""1764756000""#, #""nan""#, #""inf""#, #""0x10""#, #""true""#,
        #""false""#, #""p""#, #""u""#, #""r""#, #""c""#, #""x""#, #""caf\u00e9""#, #""ü""#, #""a\"b""#,
        #""loc\u0061tion""#,
    ]

    static let invalidScalars = [
        "01", "-", "2.", "1e", "1e400", "+1", ".5", "nul", "tru", "NaN", "\"bad\u{01}\"", "\"open",
        #""\x""#, #""\ud800""#, "\"\u{FF}\"",
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
                return OwnTracksDirectFuzzTests.invalidScalars.randomElement(using: &rng)!
            }
            return OwnTracksDirectFuzzTests.validScalars.randomElement(using: &rng)!
        }

        mutating func value(depth: Int) -> String {
            let roll = Int.random(in: 0..<100, using: &rng)
            if depth > 4 || roll < 85 { return scalar() }
            if roll < 93 {
                let count = Int.random(in: 0...3, using: &rng)
                return "[" + (0..<count).map { _ in value(depth: depth + 1) }.joined(separator: ",") + "]"
            }
            return "{\"a\":" + value(depth: depth + 1) + (chance(20) ? ",\"a\":1" : "") + "}"
        }

        mutating func type() -> String {
            if chance(85) { return #""location""# }
            return [#""transition""#, #""lwt""#, #""encrypted""#, #""waypoint""#, "1", "null", #""bogus""#]
                .randomElement(using: &rng)!
        }

        mutating func document() -> String {
            var used: Set<String> = []
            var parts: [String] = []
            if chance(95) { parts.append("\"_type\":" + space() + type()) }
            // Most messages carry a usable position and time, so that many become fixes.
            if chance(60) {
                used.formUnion(["lat", "lon", "tst"])
                parts += ["\"lat\":52.52", "\"lon\":" + space() + "13.405", "\"tst\":1764756000"]
            }
            for _ in 0..<Int.random(in: 0...14, using: &rng) {
                var name = OwnTracksDirectFuzzTests.names.randomElement(using: &rng)!
                if used.contains(name) && (valid || !chance(30)) { continue }
                if !valid && chance(2) { name = ["l\\u0061t", "lät", "l\"at"].randomElement(using: &rng)! }
                used.insert(name)
                parts.append(
                    space() + "\"" + name + "\"" + space() + ":" + space() + value(depth: 1) + space())
            }
            parts.shuffle(using: &rng)
            let object = "{" + parts.joined(separator: ",") + "}"
            if !valid && chance(3) { return "[" + object + "]" }
            return space() + object + space()
        }
    }

    static func agree(_ direct: OwnTracks.Decoded, _ tree: OwnTracks.Decoded) -> Bool {
        direct.items.map(\.index) == tree.items.map(\.index)
            && direct.items.map(\.fix) == tree.items.map(\.fix)
            && direct.rejections.map(\.index) == tree.rejections.map(\.index)
            && direct.rejections.map(\.rejection) == tree.rejections.map(\.rejection)
            && direct.places.isEmpty && tree.places.isEmpty && direct.counted.isEmpty && tree.counted.isEmpty
    }

    static func tree(_ bytes: [UInt8]) -> OwnTracks.Decoded {
        switch OwnTracks.document(bytes) {
        case .success(let document?):
            return OwnTracks.decode(document: document, deviceID: 7, clientProtocol: .owntracksHTTP)
        case .success(nil):
            return OwnTracks.Decoded()
        case .failure(let rejection):
            var decoded = OwnTracks.Decoded()
            decoded.rejections.append(.init(index: 0, rejection))
            return decoded
        }
    }

    @Test func randomMessagesAgreeWithTheTree() {
        var answered = 0
        var fixes = 0
        for seed in 0..<6_000 {
            var body = Body(rng: Generator(state: UInt64(seed)), valid: seed % 2 == 0)
            let bytes = Array(body.document().utf8)
            guard let direct = OwnTracks.decodeDirect(bytes) else { continue }
            answered += 1
            fixes += direct.items.count
            #expect(
                Self.agree(direct, Self.tree(bytes)),
                "seed \(seed): \(String(decoding: bytes.prefix(300), as: UTF8.self))")
        }
        // Many messages are answered directly, some with a fix: the comparison is not vacuous.
        #expect(answered > 2_000 && fixes > 100, "\(answered) answered, \(fixes) fixes")
    }

    /// The apps' own location messages (Fixtures/clients/owntracks) take the direct path, and
    /// every truncation of one, and every one of its bytes changed, agrees with the tree.
    @Test func theAppsLocationsTakeTheDirectPathAndEveryDamagedCopyAgrees() throws {
        let body = Array(
            #"{"_type":"location","_id":"0a1b2c3d","acc":13,"alt":52,"batt":81,"bs":1,"conn":"w","created_at":1764756032,"lat":52.520008,"lon":13.404954,"m":1,"t":"u","tid":"jp","topic":"owntracks/jane/pixel","tst":1764756030,"vac":3,"vel":4,"cog":270}"#
                .utf8)
        let direct = try #require(OwnTracks.decodeDirect(body))
        #expect(direct.items.count == 1 && direct.rejections.isEmpty)
        #expect(Self.agree(direct, Self.tree(body)))
        for cut in 0..<body.count {
            let cutBody = Array(body.prefix(cut))
            if let answer = OwnTracks.decodeDirect(cutBody) {
                #expect(Self.agree(answer, Self.tree(cutBody)))
            }
        }
        for position in body.indices {
            for replacement: UInt8 in [0x20, 0x22, 0x2C, 0x30, 0x3A, 0x5C, 0x7B, 0x7D, 0x2D, 0x65, 0xC3] {
                var changed = body
                changed[position] = replacement
                if let answer = OwnTracks.decodeDirect(changed) {
                    #expect(
                        Self.agree(answer, Self.tree(changed)),
                        "\(String(decoding: changed, as: UTF8.self))")
                }
            }
        }
    }
}
