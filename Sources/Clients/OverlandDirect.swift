import Identity
import Ingest
import JSON

#if canImport(Glibc)
    import Glibc
#endif

extension OverlandDecoder {
    /// An Overland body read straight from its bytes, without a `JSONValue` tree of the whole body:
    /// building and walking that tree cost two thirds of the throughput of 1,000-point batches
    /// (docs/benchmarks.md). In the model of `ReportDecoder.decodeDirect`, it answers only when its
    /// answer is certainly the tree path's, and nil otherwise (the caller then decodes the tree):
    /// 1. it returns only after reading the whole body, as strict JSON, through `JSONScanner`, with
    ///    no member name repeated in any object (the tree parser refuses repeated names) and no
    ///    nesting deeper than the tree parser allows;
    /// 2. it gives up on anything outside the plain shape: member names with escapes, `locations`
    ///    missing, repeated, not an array or longer than `batchFixesMax`, an element that is not an
    ///    object, a `geometry` or `properties` that is not an object, a member a fix is read from
    ///    that holds an object or an array, a `coordinates` element that is not a scalar;
    /// 3. within that shape, each element is rebuilt as a small tree holding exactly the members
    ///    `feature` reads, and goes through `feature`, so fixes, skips and rejections are the tree
    ///    path's by construction.
    public static func decodeDirect(_ body: [UInt8], limits: IngestLimits) -> AppBatch? {
        body.withUnsafeBytes { buffer in
            var scanner = JSONScanner(buffer)
            return decodeDirect(&scanner, limits: limits)
        }
    }

    /// Deeper nesting is left to the tree parser (whose own limit, 64, is the one that counts):
    /// Overland nests four deep.
    static let directDepthMax = 32

    /// The members of `properties` that `feature` and `visit` read, with their names' bytes (a
    /// name is matched by length and memcmp: comparing through `String.UTF8View` took a fifth of
    /// the server's time); every other member is skipped.
    static let propertiesRead: [(key: String, bytes: [UInt8])] = [
        "action", "type", "timestamp", "horizontal_accuracy", "vertical_accuracy", "altitude", "speed",
        "course",
        "battery_level", "battery_state", "arrival_date", "departure_date",
    ].map { ($0, Array($0.utf8)) }
    static let locationsName = Array("locations".utf8)
    static let geometryName = Array("geometry".utf8)
    static let propertiesName = Array("properties".utf8)
    static let coordinatesName = Array("coordinates".utf8)

    static func equal(_ name: UnsafeBufferPointer<UInt8>, _ bytes: [UInt8]) -> Bool {
        guard name.count == bytes.count else { return false }
        return bytes.withUnsafeBufferPointer { same(name, $0) }
    }

    /// Equal bytes, the lengths being equal (an empty name has no base address to compare).
    static func same(_ left: UnsafeBufferPointer<UInt8>, _ right: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let leftBase = left.baseAddress, let rightBase = right.baseAddress else { return true }
        return memcmp(leftBase, rightBase, left.count) == 0
    }

    private static func decodeDirect(_ scanner: inout JSONScanner, limits: IngestLimits) -> AppBatch? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var names = SeenNames()
        var batch: AppBatch?
        if !scanner.take(UInt8(ascii: "}")) {
            repeat {
                guard let name = scanner.plainString(), names.insert(name), scanner.take(UInt8(ascii: ":"))
                else {
                    return nil
                }
                if equal(name, locationsName) {
                    guard let read = locations(&scanner, limits: limits) else { return nil }
                    batch = read
                } else {
                    guard skip(&scanner, depth: 2) else { return nil }
                }
            } while scanner.take(UInt8(ascii: ","))
            guard scanner.take(UInt8(ascii: "}")) else { return nil }
        }
        guard scanner.atEnd() else { return nil }
        return batch
    }

    private static func locations(_ scanner: inout JSONScanner, limits: IngestLimits) -> AppBatch? {
        guard scanner.take(UInt8(ascii: "[")) else { return nil }
        var batch = AppBatch()
        if scanner.take(UInt8(ascii: "]")) { return batch }
        var index = 0
        repeat {
            guard index < limits.batchFixesMax, let element = element(&scanner) else { return nil }
            do {
                if let fix = try feature(element) {
                    batch.fixes.append(AppBatch.Item(index: index, fix: fix))
                } else {
                    batch.skipped += 1
                }
            } catch {
                batch.rejections.append(AppRejection(index: index, error.code, error.detail))
            }
            index += 1
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "]")) else { return nil }
        return batch
    }

    /// One element of `locations`, holding only what `feature` reads.
    private static func element(_ scanner: inout JSONScanner) -> JSONValue? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var names = SeenNames()
        var members: [JSONObject.Member] = []
        if scanner.take(UInt8(ascii: "}")) { return .object(JSONObject(members)) }
        repeat {
            guard let name = scanner.plainString(), names.insert(name), scanner.take(UInt8(ascii: ":")) else {
                return nil
            }
            if equal(name, geometryName) {
                guard let geometry = geometry(&scanner) else { return nil }
                members.append(JSONObject.Member(key: "geometry", value: geometry))
            } else if equal(name, propertiesName) {
                guard let properties = properties(&scanner) else { return nil }
                members.append(JSONObject.Member(key: "properties", value: properties))
            } else {
                guard skip(&scanner, depth: 3) else { return nil }
            }
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "}")) else { return nil }
        return .object(JSONObject(members))
    }

    private static func geometry(_ scanner: inout JSONScanner) -> JSONValue? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var names = SeenNames()
        var members: [JSONObject.Member] = []
        if scanner.take(UInt8(ascii: "}")) { return .object(JSONObject(members)) }
        repeat {
            guard let name = scanner.plainString(), names.insert(name), scanner.take(UInt8(ascii: ":")) else {
                return nil
            }
            if equal(name, coordinatesName) {
                guard scanner.take(UInt8(ascii: "[")) else { return nil }
                var values: [JSONValue] = []
                if !scanner.take(UInt8(ascii: "]")) {
                    repeat {
                        guard let value = scanner.scalar() else { return nil }
                        values.append(value)
                    } while scanner.take(UInt8(ascii: ","))
                    guard scanner.take(UInt8(ascii: "]")) else { return nil }
                }
                members.append(JSONObject.Member(key: "coordinates", value: .array(values)))
            } else {
                guard skip(&scanner, depth: 4) else { return nil }
            }
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "}")) else { return nil }
        return .object(JSONObject(members))
    }

    private static func properties(_ scanner: inout JSONScanner) -> JSONValue? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var names = SeenNames()
        var members: [JSONObject.Member] = []
        if scanner.take(UInt8(ascii: "}")) { return .object(JSONObject(members)) }
        repeat {
            guard let name = scanner.plainString(), names.insert(name), scanner.take(UInt8(ascii: ":")) else {
                return nil
            }
            if let read = propertiesRead.first(where: { equal(name, $0.bytes) }) {
                guard let value = scanner.scalar() else { return nil }
                members.append(JSONObject.Member(key: read.key, value: value))
            } else {
                guard skip(&scanner, depth: 4) else { return nil }
            }
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "}")) else { return nil }
        return .object(JSONObject(members))
    }

    /// Reads past the value that comes next, checking it as the tree parser would (names not
    /// repeated, nesting within its limit); false to give up. `depth`: containers already open.
    private static func skip(_ scanner: inout JSONScanner, depth: Int) -> Bool {
        if scanner.take(UInt8(ascii: "{")) {
            guard depth < Self.directDepthMax else { return false }
            if scanner.take(UInt8(ascii: "}")) { return true }
            var names = SeenNames()
            repeat {
                guard let name = scanner.plainString(), names.insert(name), scanner.take(UInt8(ascii: ":")),
                    skip(&scanner, depth: depth + 1)
                else { return false }
            } while scanner.take(UInt8(ascii: ","))
            return scanner.take(UInt8(ascii: "}"))
        }
        if scanner.take(UInt8(ascii: "[")) {
            guard depth < Self.directDepthMax else { return false }
            if scanner.take(UInt8(ascii: "]")) { return true }
            repeat {
                guard skip(&scanner, depth: depth + 1) else { return false }
            } while scanner.take(UInt8(ascii: ","))
            return scanner.take(UInt8(ascii: "]"))
        }
        return scanner.scalar() != nil
    }

    /// The member names of one object so far, as the scanned bytes (valid while the body is); an
    /// object has about fifteen, so a linear search beats hashing.
    struct SeenNames {
        var names: [UnsafeBufferPointer<UInt8>] = []

        /// False when `name` was seen before in this object.
        mutating func insert(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
            for seen in names
            where seen.count == name.count && OverlandDecoder.same(seen, name) {
                return false
            }
            names.append(name)
            return true
        }
    }
}
