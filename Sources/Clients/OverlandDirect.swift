import Identity
import Ingest
import JSON

#if canImport(Glibc)
    import Glibc
#endif

extension OverlandDecoder {
    /// An Overland body read straight from its bytes into `FeatureMembers`, without a `JSONValue`
    /// tree of the body or of its elements: the tree cost two thirds of the throughput of
    /// 1,000-point batches, the small tree per element half of what was left (docs/benchmarks.md).
    /// In the model of `ReportDecoder.decodeDirect`, it answers only when its answer is certainly
    /// the tree path's, and nil otherwise (the caller then decodes the tree):
    /// 1. it returns only after reading the whole body, as strict JSON, through `JSONScanner`, with
    ///    no member name repeated in any object (the tree parser refuses repeated names) and no
    ///    nesting deeper than the tree parser allows;
    /// 2. it gives up on anything outside the plain shape: member names with escapes, an object
    ///    with more than `directNamesMax` members, `locations` missing, repeated, not an array or
    ///    longer than `batchFixesMax`, an element that is not an object, a `geometry` or `properties`
    ///    that is not an object, a member a fix is read from that holds an object or an array, a `coordinates`
    ///    element that is not a scalar;
    /// 3. within that shape, each element's members are read into the `FeatureMembers` the tree
    ///    path would build, and go through the same `feature`, so fixes, skips and rejections are
    ///    the tree path's by construction.
    public static func decodeDirect(_ body: [UInt8], limits: IngestLimits) -> AppBatch? {
        body.withUnsafeBytes { buffer in
            var scanner = JSONScanner(buffer)
            var batch: AppBatch?
            let read = members(of: &scanner, depth: 1) { name, scanner in
                guard equal(name, "locations") else { return skip(&scanner, depth: 1) }
                batch = locations(&scanner, limits: limits)
                return batch != nil
            }
            guard read, scanner.atEnd() else { return nil }
            return batch
        }
    }

    /// Deeper nesting is left to the tree parser (whose own limit, 64, is the one that counts):
    /// Overland nests four deep.
    static let directDepthMax = 32

    /// Members one object may have on the direct path (their names are kept on the stack to find
    /// a repeated one); an Overland location's `properties` has about fifteen.
    public static let directNamesMax = 64

    private static func locations(_ scanner: inout JSONScanner, limits: IngestLimits) -> AppBatch? {
        guard scanner.take(UInt8(ascii: "[")) else { return nil }
        var batch = AppBatch()
        if scanner.take(UInt8(ascii: "]")) { return batch }
        var index = 0
        repeat {
            guard index < limits.batchFixesMax, let members = feature(&scanner) else { return nil }
            batch.add(index) { () throws(FixRejection) in try feature(members) }
            index += 1
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "]")) else { return nil }
        return batch
    }

    /// One element of `locations`, read into what `feature` reads.
    private static func feature(_ scanner: inout JSONScanner) -> FeatureMembers? {
        var feature = FeatureMembers()
        let read = members(of: &scanner, depth: 3) { name, scanner in
            if equal(name, "geometry") { return geometry(&scanner, into: &feature) }
            if equal(name, "properties") { return properties(&scanner, into: &feature) }
            return skip(&scanner, depth: 3)
        }
        return read ? feature : nil
    }

    /// `geometry`: only its `coordinates` are read.
    private static func geometry(_ scanner: inout JSONScanner, into feature: inout FeatureMembers) -> Bool {
        members(of: &scanner, depth: 4) { name, scanner in
            guard equal(name, "coordinates") else { return skip(&scanner, depth: 4) }
            guard scanner.take(UInt8(ascii: "[")) else { return false }
            var values: (JSONValue, JSONValue)?
            var count = 0
            if !scanner.take(UInt8(ascii: "]")) {
                repeat {
                    guard let value = scanner.scalar() else { return false }
                    if count == 0 {
                        values = (value, .null)
                    } else if count == 1 {
                        values!.1 = value
                    }
                    count += 1
                } while scanner.take(UInt8(ascii: ","))
                guard scanner.take(UInt8(ascii: "]")) else { return false }
            }
            if count >= 2, let (longitude, latitude) = values {
                feature.coordinates = .pair(longitude, latitude)
            } else {
                feature.coordinates = .notAPair(typeName: "array")
            }
            return true
        }
    }

    private static func properties(_ scanner: inout JSONScanner, into feature: inout FeatureMembers) -> Bool {
        feature.hasProperties = true
        return members(of: &scanner, depth: 4) { name, scanner in
            guard let property = FeatureMembers.Property(named: name) else { return skip(&scanner, depth: 4) }
            guard let value = scanner.scalar() else { return false }
            feature[property] = value
            return true
        }
    }

    /// The one loop over an object's members on the direct path: reads the object that comes next,
    /// handing each member's name to `member`, which must read or skip its value (false to give
    /// up). False when the next value is not an object, a name is escaped or repeated, the object
    /// has more than `directNamesMax` members, or `depth` (containers open, the object included)
    /// passes `directDepthMax`.
    private static func members(
        of scanner: inout JSONScanner, depth: Int,
        _ member: (UnsafeBufferPointer<UInt8>, inout JSONScanner) -> Bool
    ) -> Bool {
        scanner.take(UInt8(ascii: "{")) && membersAfterBrace(of: &scanner, depth: depth, member)
    }

    /// `members`, its `{` already read.
    private static func membersAfterBrace(
        of scanner: inout JSONScanner, depth: Int,
        _ member: (UnsafeBufferPointer<UInt8>, inout JSONScanner) -> Bool
    ) -> Bool {
        guard depth <= directDepthMax else { return false }
        if scanner.take(UInt8(ascii: "}")) { return true }
        return withUnsafeTemporaryAllocation(of: UnsafeBufferPointer<UInt8>.self, capacity: directNamesMax) {
            seen in
            var count = 0
            // One bit per (length, last byte) class of the names so far: a name whose bit is clear
            // was not seen, so the names are compared only on a hit.
            var classes: UInt64 = 0
            repeat {
                guard count < directNamesMax, let name = scanner.plainString(),
                    scanner.take(UInt8(ascii: ":"))
                else { return false }
                let bit: UInt64 = 1 << ((UInt64(name.count) &* 7 &+ UInt64(name.last ?? 0)) & 63)
                if classes & bit != 0 {
                    for index in 0..<count where seen[index].count == name.count && same(seen[index], name) {
                        return false
                    }
                }
                classes |= bit
                seen.initializeElement(at: count, to: name)
                count += 1
                guard member(name, &scanner) else { return false }
            } while scanner.take(UInt8(ascii: ","))
            return scanner.take(UInt8(ascii: "}"))
        }
    }

    /// Reads past the value that comes next, checking it as the tree parser would (names not
    /// repeated, nesting within its limit); false to give up. `depth`: containers already open.
    private static func skip(_ scanner: inout JSONScanner, depth: Int) -> Bool {
        if scanner.take(UInt8(ascii: "{")) {
            return membersAfterBrace(of: &scanner, depth: depth + 1) { _, scanner in
                skip(&scanner, depth: depth + 1)
            }
        }
        if scanner.take(UInt8(ascii: "[")) {
            guard depth < directDepthMax else { return false }
            if scanner.take(UInt8(ascii: "]")) { return true }
            repeat {
                guard skip(&scanner, depth: depth + 1) else { return false }
            } while scanner.take(UInt8(ascii: ","))
            return scanner.take(UInt8(ascii: "]"))
        }
        // A plain string is passed over without making a `String` of it.
        return scanner.plainString() != nil || scanner.scalar() != nil
    }

    /// A name is matched by its bytes, without making a `String` (comparing through
    /// `String.UTF8View` took a fifth of the server's time), in a loop the compiler keeps inline:
    /// names are a few bytes, and a call to memcmp for each cost more than the comparison.
    static func equal(_ name: UnsafeBufferPointer<UInt8>, _ expected: StaticString) -> Bool {
        guard name.count == expected.utf8CodeUnitCount else { return false }
        let wanted = expected.utf8Start
        for index in 0..<name.count where name[index] != wanted[index] { return false }
        return true
    }

    /// Equal bytes, the lengths being equal (an empty name has no base address to compare).
    private static func same(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool
    {
        guard let leftBase = left.baseAddress, let rightBase = right.baseAddress else { return true }
        return memcmp(leftBase, rightBase, left.count) == 0
    }
}
