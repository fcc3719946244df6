import Clients
import Identity
import Ingest
import Testing

/// `OverlandDecoder.decodeDirect` must answer exactly as `decodeTree` whenever it answers at all:
/// checked on every fixture, every truncation of each, every one-byte change of the smallest, and
/// bodies of the bad-input table.
@Suite struct OverlandDirectTests {
    let limits = IngestLimits()

    func agree(_ body: [UInt8], _ label: String) {
        guard let direct = OverlandDecoder.decodeDirect(body, limits: limits) else { return }
        let tree = try? OverlandDecoder.decodeTree(body, limits: limits)
        #expect(tree == direct, "\(label): \(String(decoding: body.prefix(200), as: UTF8.self))")
    }

    static var bodies: [(String, [UInt8])] {
        get throws {
            (try FixtureCase.all("overland")
                + (try FixtureCase.all("gpslogger")).filter {
                    $0.target.contains("/overland/")
                }).map { ($0.description, $0.body) }
        }
    }

    @Test func theFixturesAreReadDirectlyAndAsTheTreeReadsThem() throws {
        for (label, body) in try Self.bodies {
            let direct = OverlandDecoder.decodeDirect(body, limits: limits)
            #expect(direct != nil, "\(label): the plain shape must take the direct path")
            #expect(direct == (try OverlandDecoder.decodeTree(body, limits: limits)), "\(label)")
        }
    }

    @Test func everyTruncationAgrees() throws {
        for (label, body) in try Self.bodies {
            for length in 0..<body.count { agree(Array(body.prefix(length)), "\(label) cut at \(length)") }
        }
    }

    @Test func everyChangedByteAgrees() throws {
        let (label, body) = try #require(try Self.bodies.min { $0.1.count < $1.1.count })
        for index in body.indices {
            for replacement in [UInt8(ascii: "\""), UInt8(ascii: "}"), UInt8(ascii: "1"), UInt8(ascii: "x")] {
                var changed = body
                changed[index] = replacement
                agree(changed, "\(label) byte \(index) -> \(replacement)")
            }
        }
    }

    @Test(arguments: [
        #"{"locations":[{"type":"Feature","properties":{"timestamp":"2026-12-01T08:00:00Z"},"properties":{}}]}"#,
        #"{"locations":[],"locations":[]}"#,
        #"{"locations":[{"geometry":{"coordinates":[1,2]},"properties":{"speed":[1]}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[[1],2]},"properties":{}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[1,2]},"properties":{"\u0061ction":"visit"}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[1,2]},"properties":{"motion":[{"a":1,"a":2}]}}]}"#,
        #"{"locations":[3,{"properties":3},{}]}"#,
        #"{"current":{"x":1},"locations":[]}"#,
        #"{"locations":[{"geometry":{"coordinates":[13.4,52.5,34]},"properties":{"timestamp":"2026-12-01T08:00:00Z"}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[13.4]},"properties":{"timestamp":"2026-12-01T08:00:00Z"}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[]},"properties":{}},{"geometry":5,"properties":{}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[1,2]},"properties":{"xb":1,"yb":2,"timestamp":"2026-12-01T08:00:00Z"}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[1,2]},"properties":{"xb":1,"yb":2,"xb":3}}]}"#,
        #"{"locations":[{"geometry":{"coordinates":[1,2]},"properties":{"wifi":"caf\u00e9","device_id":"ü"}}]}"#,
    ])
    func unusualBodiesAgree(_ body: String) {
        agree(Array(body.utf8), body)
    }

    /// An object with more members than the direct path keeps names for is left to the tree.
    @Test func manyMembersAreLeftToTheTree() throws {
        let extra = (0..<OverlandDecoder.directNamesMax).map { "\"m\($0)\":\($0)" }.joined(separator: ",")
        let body =
            Array(
                #"{"locations":[{"geometry":{"coordinates":[13.4,52.5]},"properties":{"timestamp":"2026-12-01T08:00:00Z","#
                    .utf8) + Array(extra.utf8) + Array("}}]}".utf8)
        #expect(OverlandDecoder.decodeDirect(body, limits: limits) == nil)
        let batch = try OverlandDecoder.decode(body, limits: limits)
        let tree = try OverlandDecoder.decodeTree(body, limits: limits)
        #expect(batch.fixes.count == 1 && batch == tree)
    }
}
