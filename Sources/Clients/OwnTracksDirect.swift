import Ingest
import JSON

extension OwnTracks {
    /// One `location` message read straight from its bytes, without a `JSONValue` tree of the
    /// body: the message every phone sends, many times a day. As `OverlandDecoder.decodeDirect`,
    /// it answers only when its answer is certainly the tree path's, and nil otherwise (the caller
    /// then parses the tree):
    /// 1. it returns only after reading the whole body, as strict JSON, one object, with no member
    ///    name repeated and no nesting deeper than the tree parser allows (the envelope reader of
    ///    `OverlandDecoder`, on `JSONScanner`, the tree parser's own code);
    /// 2. it gives up on anything else: names with escapes or bytes outside printable ASCII, more
    ///    than `OverlandDecoder.directNamesMax` members, `_type` missing or other than `location`,
    ///    an object or an array in a member `location` reads;
    /// 3. the members `location` reads are kept as the tree would hold them (`JSONScanner.scalar`)
    ///    and go through the same `location`, so the fix, or the rejection, is the tree path's by
    ///    construction.
    static func decodeDirect(_ body: [UInt8]) -> Decoded? {
        body.withUnsafeBytes { buffer -> Decoded? in
            var scanner = JSONScanner(buffer)
            var read: [JSONObject.Member] = []
            read.reserveCapacity(locationNames.count)
            let complete = OverlandDecoder.members(of: &scanner, depth: 1) { name, scanner in
                guard let key = locationName(name) else { return OverlandDecoder.skip(&scanner, depth: 1) }
                guard let value = scanner.scalar() else { return false }
                read.append(JSONObject.Member(key: key, value: value))
                return true
            }
            guard complete, scanner.atEnd() else { return nil }
            let object = JSONObject(read)
            guard object["_type"] == .string("location") else { return nil }
            var decoded = Decoded()
            do throws(FixRejection) {
                decoded.items.append(.init(index: 0, fix: try location(object)))
            } catch {
                decoded.rejections.append(.init(index: 0, error))
            }
            return decoded
        }
    }

    /// The members `location` reads, and `_type`.
    static let locationNames: [StaticString] = [
        "_type", "lat", "lon", "tst", "acc", "alt", "vel", "cog", "batt", "bs", "t",
    ]

    /// `locationNames` as the keys of a `JSONObject`.
    static let locationKeys: [String] = locationNames.map { $0.description }

    /// `name` as the key `location` looks up, when it is one of `locationNames`.
    private static func locationName(_ name: UnsafeBufferPointer<UInt8>) -> String? {
        for (index, candidate) in locationNames.enumerated() where OverlandDecoder.equal(name, candidate) {
            return locationKeys[index]
        }
        return nil
    }
}
