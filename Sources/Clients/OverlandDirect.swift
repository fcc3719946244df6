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
    /// 1. it returns only after reading the whole body, as strict JSON, with no member name
    ///    repeated in any object (the tree parser refuses repeated names) and no nesting deeper than
    ///    the tree parser allows; numbers, and strings that are not printable ASCII without
    ///    escapes, are read by `JSONScanner` (the tree parser's own code);
    /// 2. it gives up on anything outside the plain shape: member names with escapes or bytes
    ///    outside printable ASCII, an object with more than `directNamesMax` members (or, in a
    ///    location, more than `directUnknownNamesMax` names it does not know), `locations` missing,
    ///    repeated, not an array or longer than `batchFixesMax`, an element that is not an object,
    ///    a `geometry` or `properties` that is not an object, a member a fix is read from that holds
    ///    an object or an array, a `coordinates` element that is not a scalar;
    /// 3. within that shape, each element's members are read into the `FeatureMembers` the tree
    ///    path would build, and go through the same `feature`, so fixes, skips and rejections are
    ///    the tree path's by construction.
    /// The locations themselves (nearly all of a body) are read by `LocationReader`, one pass over
    /// their bytes in this module; the envelope around them by `JSONScanner`.
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

    /// Names a location's object may have that `LocationReader` does not know (kept to find a
    /// repeated one); Overland sends none.
    static let directUnknownNamesMax = 16

    private static func locations(_ scanner: inout JSONScanner, limits: IngestLimits) -> AppBatch? {
        guard scanner.take(UInt8(ascii: "[")) else { return nil }
        var batch = AppBatch()
        if scanner.take(UInt8(ascii: "]")) { return batch }
        var reader = LocationReader(scanner.bytes, at: scanner.offset)
        // A location is a few hundred bytes: room for every fix at once, within the batch limit.
        batch.fixes.reserveCapacity(min(limits.batchFixesMax, (reader.count - reader.at) / 128 + 1))
        var index = 0
        // One location's members at a time, read in place: returned by value, a location's
        // members (about 340 bytes) were copied three times on their way to `feature`.
        var members = FeatureMembers()
        repeat {
            members = FeatureMembers()
            guard index < limits.batchFixesMax, reader.feature(&scanner, into: &members) else { return nil }
            batch.add(index) { () throws(FixRejection) in try feature(members) }
            index += 1
        } while reader.take(UInt8(ascii: ","))
        guard reader.take(UInt8(ascii: "]")) else { return nil }
        scanner.offset = reader.at
        return batch
    }

    /// The one loop over an object's members on the envelope (outside the locations): reads the
    /// object that comes next, handing each member's name to `member`, which must read or skip its
    /// value (false to give up). False when the next value is not an object, a name is escaped or
    /// repeated, the object has more than `directNamesMax` members, or `depth` (containers open,
    /// the object included) passes `directDepthMax`.
    static func members(
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
    static func skip(_ scanner: inout JSONScanner, depth: Int) -> Bool {
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
    static func same(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let leftBase = left.baseAddress, let rightBase = right.baseAddress else { return true }
        return memcmp(leftBase, rightBase, left.count) == 0
    }
}

/// Reads the elements of `locations` in one pass over their bytes: per member, the name is found
/// and matched against the names a location has (`LocationName`) right where its closing quote is
/// found, the `:` after it taken in the same step, and each value read or passed over in place;
/// only numbers (converted as the tree parser converts them), strings that are not printable ASCII
/// without escapes, and nested objects go through `JSONScanner`. A profile of the previous reader
/// (a `JSONScanner` call for each name, colon, value and comma, each skipping whitespace and
/// checking bounds again, and each wanted value kept as a `JSONValue`) put its cost in those calls,
/// not in the bytes (docs/benchmarks.md).
struct LocationReader {
    let base: UnsafePointer<UInt8>
    let count: Int
    var at: Int

    init(_ bytes: UnsafeBufferPointer<UInt8>, at: Int) {
        // A JSONScanner over an empty buffer has a placeholder base, never read (count is 0).
        base = bytes.baseAddress ?? UnsafePointer(bitPattern: 1)!
        count = bytes.count
        self.at = at
    }

    /// JSON whitespace; the apps send none between tokens, so the first test usually ends it.
    @inline(__always)
    mutating func skipWhitespace() {
        while at < count {
            switch base[at] {
            case 0x20, 0x0A, 0x0D, 0x09: at += 1
            default: return
            }
        }
    }

    @inline(__always)
    mutating func take(_ byte: UInt8) -> Bool {
        if at < count, base[at] == byte {
            at += 1
            return true
        }
        skipWhitespace()
        guard at < count, base[at] == byte else { return false }
        at += 1
        return true
    }

    /// Where the first byte at or after `from` that ends a plain run is (a quote, a backslash, a
    /// control byte or a non-ASCII one), looking eight bytes at a time while eight remain; the
    /// caller reads that byte itself. Each test below flags a byte exactly when nothing before it
    /// in the word was flagged (a borrow only runs upward from a flagged byte), so the lowest flag
    /// is the first such byte.
    @inline(__always)
    func plainRunEnd(from: Int) -> Int {
        var end = from
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        while end + 8 <= count {
            let word = UnsafeRawPointer(base + end).loadUnaligned(as: UInt64.self)
            let quote = word ^ (ones &* 0x22)
            let backslash = word ^ (ones &* 0x5C)
            let flags =
                ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash | (word &- ones &* 0x20) & ~word
                    | word) & highs
            if flags != 0 { return end + flags.trailingZeroBitCount / 8 }
            end += 8
        }
        return end
    }

    /// The member name that comes next and the `:` after it: the name's bytes when it is printable
    /// ASCII without escapes (so that they are its value), nil otherwise (the caller gives up).
    @inline(__always)
    mutating func name() -> UnsafeBufferPointer<UInt8>? {
        skipWhitespace()
        guard at < count, base[at] == UInt8(ascii: "\"") else { return nil }
        let start = at + 1
        var end = plainRunEnd(from: start)
        while true {
            guard end < count else { return nil }
            let byte = base[end]
            if byte == UInt8(ascii: "\"") { break }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
            end += 1
        }
        at = end + 1
        guard take(UInt8(ascii: ":")) else { return nil }
        return UnsafeBufferPointer(start: base + start, count: end - start)
    }

    /// A string that comes next (its opening quote at `at`) when it is printable ASCII without
    /// escapes: its bytes, `at` past it. Nil with `at` unchanged otherwise.
    @inline(__always)
    mutating func plainString() -> UnsafeBufferPointer<UInt8>? {
        let start = at + 1
        var end = plainRunEnd(from: start)
        while end < count {
            let byte = base[end]
            if byte == UInt8(ascii: "\"") {
                at = end + 1
                return UnsafeBufferPointer(start: base + start, count: end - start)
            }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
            end += 1
        }
        return nil
    }

    /// The literal `text` at `at`, consumed.
    @inline(__always)
    mutating func literal(_ text: StaticString) -> Bool {
        let length = text.utf8CodeUnitCount
        guard count - at >= length else { return false }
        for offset in 0..<length where base[at + offset] != text.utf8Start[offset] { return false }
        at += length
        return true
    }

    /// `scanner` at this reader's place for one read, then this reader past what it read.
    @inline(__always)
    mutating func through<Read>(_ scanner: inout JSONScanner, _ read: (inout JSONScanner) -> Read) -> Read {
        scanner.offset = at
        let result = read(&scanner)
        at = scanner.offset
        return result
    }

    /// The scalar that comes next as `feature` reads it; nil (give up) for an object, an array or
    /// anything that is not JSON.
    mutating func scalar(_ scanner: inout JSONScanner) -> FeatureMembers.Value? {
        skipWhitespace()
        guard at < count else { return nil }
        switch base[at] {
        case UInt8(ascii: "\""):
            // A string with escapes or bytes outside printable ASCII would have to be decoded and
            // kept: the tree path reads it (Overland writes none in the members a fix is made of).
            return plainString().map { .string($0) }
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            // Nearly every number of a location is a short decimal: read in place, by the tree
            // parser's own rule; any other through the scanner (the tree parser's code).
            if let value = JSONNumber.shortDecimal(base, count: count, at: &at) { return .number(value) }
            return through(&scanner) { $0.number() }.map { .number($0) }
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        default: return nil
        }
    }

    /// Passes over the value that comes next, checking it as the tree parser would; false to give
    /// up. `depth`: containers already open.
    mutating func skip(_ scanner: inout JSONScanner, depth: Int) -> Bool {
        skipWhitespace()
        guard at < count else { return false }
        switch base[at] {
        case UInt8(ascii: "\""):
            if plainString() != nil { return true }
            return through(&scanner) { $0.string() } != nil
        case UInt8(ascii: "["):
            guard depth < OverlandDecoder.directDepthMax else { return false }
            at += 1
            if take(UInt8(ascii: "]")) { return true }
            repeat {
                guard skip(&scanner, depth: depth + 1) else { return false }
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]"))
        case UInt8(ascii: "{"):
            return through(&scanner) { OverlandDecoder.skip(&$0, depth: depth) }
        default:
            return scalar(&scanner) != nil
        }
    }

    /// The members of one object of a location, known names by a bit each: calls `member` with
    /// each member's known name (nil for an unknown one, whose repetition is checked here), which
    /// reads or skips its value. False to give up: not an object, a repeated name, too many
    /// members, `member` gave up.
    @inline(__always)
    mutating func object(
        depth: Int, _ member: (inout LocationReader, LocationName?) -> Bool
    ) -> Bool {
        guard depth <= OverlandDecoder.directDepthMax, take(UInt8(ascii: "{")) else { return false }
        if take(UInt8(ascii: "}")) { return true }
        // Names `LocationName` does not know, to find a repeated one: uninitialised stack space,
        // written only when there is one (Overland sends none).
        return withUnsafeTemporaryAllocation(
            of: UnsafeBufferPointer<UInt8>.self, capacity: OverlandDecoder.directUnknownNamesMax
        ) { unknown in
            var seen: UInt64 = 0
            var unknownCount = 0
            var members = 0
            repeat {
                guard members < OverlandDecoder.directNamesMax, let bytes = name() else { return false }
                members += 1
                let known = LocationName(bytes)
                if let known {
                    let bit: UInt64 = 1 << known.rawValue
                    guard seen & bit == 0 else { return false }
                    seen |= bit
                } else {
                    guard unknownCount < OverlandDecoder.directUnknownNamesMax else { return false }
                    for index in 0..<unknownCount
                    where unknown[index].count == bytes.count && OverlandDecoder.same(unknown[index], bytes) {
                        return false
                    }
                    unknown.initializeElement(at: unknownCount, to: bytes)
                    unknownCount += 1
                }
                guard member(&self, known) else { return false }
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}"))
        }
    }

    /// One element of `locations` (an object, at depth 3), read into what `feature` reads (`feature`
    /// as it is made empty); false to give up.
    mutating func feature(_ scanner: inout JSONScanner, into feature: inout FeatureMembers) -> Bool {
        object(depth: 3) { reader, name in
            switch name {
            case .geometry?: return reader.geometry(&scanner, into: &feature)
            case .properties?:
                feature.hasProperties = true
                return reader.properties(&scanner, into: &feature)
            default: return reader.skip(&scanner, depth: 3)
            }
        }
    }

    /// `geometry`: only its `coordinates` are read; every element must be a scalar.
    private mutating func geometry(_ scanner: inout JSONScanner, into feature: inout FeatureMembers) -> Bool {
        object(depth: 4) { reader, name in
            guard name == .coordinates else { return reader.skip(&scanner, depth: 4) }
            guard reader.take(UInt8(ascii: "[")) else { return false }
            var values: (FeatureMembers.Value, FeatureMembers.Value) = (.null, .null)
            var elements = 0
            if !reader.take(UInt8(ascii: "]")) {
                repeat {
                    guard let value = reader.scalar(&scanner) else { return false }
                    if elements == 0 {
                        values.0 = value
                    } else if elements == 1 {
                        values.1 = value
                    }
                    elements += 1
                } while reader.take(UInt8(ascii: ","))
                guard reader.take(UInt8(ascii: "]")) else { return false }
            }
            feature.coordinates = elements >= 2 ? .pair(values.0, values.1) : .notAPair(typeName: "array")
            return true
        }
    }

    private mutating func properties(_ scanner: inout JSONScanner, into feature: inout FeatureMembers) -> Bool
    {
        object(depth: 4) { reader, name in
            guard let name, name.rawValue < FeatureMembers.propertyCount else {
                return reader.skip(&scanner, depth: 4)
            }
            guard let value = reader.scalar(&scanner) else { return false }
            feature.set(name.rawValue, value)
            return true
        }
    }
}

/// The member names a location's objects have (feature, `geometry`, `properties`; Overland-iOS's
/// GLManager.m), a bit each in `LocationReader.object`. The first twelve are
/// `FeatureMembers.Property`'s, in its order; the others are passed over, but knowing them spares
/// the repeated-name check a comparison with every other name.
enum LocationName: Int, CaseIterable {
    case action, type, timestamp, horizontalAccuracy, verticalAccuracy, altitude, speed, course
    case batteryLevel, batteryState, arrivalDate, departureDate
    case geometry, properties, coordinates
    case speedAccuracy, courseAccuracy, motion, deviceID, wifi, pauses, activity, desiredAccuracy
    case deferred, significantChange, locationsInPayload
    case mode, start, end, distance, duration, steps, startLocation, endLocation, stoppedAutomatically

    var name: StaticString {
        if let property { return property.name }
        return switch self {
        case .geometry: "geometry"
        case .properties: "properties"
        case .coordinates: "coordinates"
        case .speedAccuracy: "speed_accuracy"
        case .courseAccuracy: "course_accuracy"
        case .motion: "motion"
        case .deviceID: "device_id"
        case .wifi: "wifi"
        case .pauses: "pauses"
        case .activity: "activity"
        case .desiredAccuracy: "desired_accuracy"
        case .deferred: "deferred"
        case .significantChange: "significant_change"
        case .locationsInPayload: "locations_in_payload"
        case .mode: "mode"
        case .start: "start"
        case .end: "end"
        case .distance: "distance"
        case .duration: "duration"
        case .steps: "steps"
        case .startLocation: "start_location"
        case .endLocation: "end_location"
        case .stoppedAutomatically: "stopped_automatically"
        default: preconditionFailure("a property's name comes from FeatureMembers.Property")
        }
    }

    /// The member of `properties` a fix is read from, for the first twelve.
    var property: FeatureMembers.Property? { FeatureMembers.Property(rawValue: rawValue) }

    /// The name `bytes` spell, or nil. The length picks the candidates, a byte that differs
    /// between them picks one, and one comparison of whole words with its literal confirms it.
    @inline(__always)
    init?(_ bytes: UnsafeBufferPointer<UInt8>) {
        let text = bytes.baseAddress!
        let count = bytes.count
        func pick(_ candidate: LocationName, _ name: StaticString) -> LocationName? {
            Self.spells(text, count, name) ? candidate : nil
        }
        let found: LocationName?
        switch count {
        case 3: found = pick(.end, "end")
        case 4:
            switch text[0] {
            case UInt8(ascii: "t"): found = pick(.type, "type")
            case UInt8(ascii: "w"): found = pick(.wifi, "wifi")
            default: found = pick(.mode, "mode")
            }
        case 5:
            if text[1] == UInt8(ascii: "p") {
                found = pick(.speed, "speed")
            } else {
                found = text[2] == UInt8(ascii: "a") ? pick(.start, "start") : pick(.steps, "steps")
            }
        case 6:
            switch text[0] {
            case UInt8(ascii: "a"): found = pick(.action, "action")
            case UInt8(ascii: "c"): found = pick(.course, "course")
            case UInt8(ascii: "m"): found = pick(.motion, "motion")
            default: found = pick(.pauses, "pauses")
            }
        case 8:
            switch text[0] {
            case UInt8(ascii: "a"):
                found =
                    text[1] == UInt8(ascii: "l") ? pick(.altitude, "altitude") : pick(.activity, "activity")
            case UInt8(ascii: "g"): found = pick(.geometry, "geometry")
            default:
                switch text[1] {
                case UInt8(ascii: "e"): found = pick(.deferred, "deferred")
                case UInt8(ascii: "i"): found = pick(.distance, "distance")
                default: found = pick(.duration, "duration")
                }
            }
        case 9:
            found =
                text[0] == UInt8(ascii: "t") ? pick(.timestamp, "timestamp") : pick(.deviceID, "device_id")
        case 10: found = pick(.properties, "properties")
        case 11: found = pick(.coordinates, "coordinates")
        case 12:
            found =
                text[0] == UInt8(ascii: "a")
                ? pick(.arrivalDate, "arrival_date") : pick(.endLocation, "end_location")
        case 13:
            found =
                text[8] == UInt8(ascii: "l")
                ? pick(.batteryLevel, "battery_level") : pick(.batteryState, "battery_state")
        case 14:
            if text[0] == UInt8(ascii: "d") {
                found = pick(.departureDate, "departure_date")
            } else {
                found =
                    text[1] == UInt8(ascii: "p")
                    ? pick(.speedAccuracy, "speed_accuracy") : pick(.startLocation, "start_location")
            }
        case 15: found = pick(.courseAccuracy, "course_accuracy")
        case 16: found = pick(.desiredAccuracy, "desired_accuracy")
        case 17: found = pick(.verticalAccuracy, "vertical_accuracy")
        case 18: found = pick(.significantChange, "significant_change")
        case 19: found = pick(.horizontalAccuracy, "horizontal_accuracy")
        case 20: found = pick(.locationsInPayload, "locations_in_payload")
        case 21: found = pick(.stoppedAutomatically, "stopped_automatically")
        default: found = nil
        }
        guard let found else { return nil }
        self = found
    }

    /// Whether the `count` bytes at `text` are `name` (of that length), compared a word at a time
    /// (two overlapping words cover 4 to 16 bytes, three up to 24).
    @inline(__always)
    static func spells(_ text: UnsafePointer<UInt8>, _ count: Int, _ name: StaticString) -> Bool {
        let left = UnsafeRawPointer(text)
        let right = UnsafeRawPointer(name.utf8Start)
        func word(_ offset: Int) -> Bool {
            left.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                == right.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
        }
        switch count {
        case 4..<8:
            return left.loadUnaligned(as: UInt32.self) == right.loadUnaligned(as: UInt32.self)
                && left.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
                    == right.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)
        case 8...16: return word(0) && word(count - 8)
        case 17...24: return word(0) && word(8) && word(count - 8)
        default: return OverlandDecoder.equal(UnsafeBufferPointer(start: text, count: count), name)
        }
    }
}
