import Events
import Identity
import JSON

#if canImport(Glibc)
    import Glibc
#endif

extension ReportDecoder {
    /// Decodes a report straight from its bytes, without a `JSONValue` tree: half of the server's
    /// CPU went to building the tree and walking it for 100-fix batches.
    ///
    /// It answers only when its answer is certainly `decodeTree`'s, and nil otherwise, so that
    /// every error and message stays `decodeTree`'s by construction:
    /// 1. it returns a report only after reading the whole body, as strict JSON, through
    ///    `JSONScanner` (the tree parser's own string and number code) and finding nothing after it;
    /// 2. it gives up (nil) on anything outside the plain shape: a top-level member other than
    ///    `batch_id` and `fixes`, either missing or repeated, a `batch_id` that is not a UUID string,
    ///    `fixes` not a non-empty array of at most `batchFixesMax` objects, a fix member that is
    ///    unknown, repeated, an object or array, or whose name is escaped, and any JSON syntax error;
    /// 3. within that shape, each fix's members are the very values the tree would hold, and go
    ///    through the same `validate`, so rejections (index, reason) are the tree path's too.
    /// A body it gives up on is parsed again by `decodeTree`: bad input costs two passes.
    public static func decodeDirect(_ body: [UInt8], receivedAtMicros: Int64, limits: IngestLimits)
        -> DecodedReport?
    {
        body.withUnsafeBytes { buffer in
            var scanner = JSONScanner(buffer)
            return decodeDirect(&scanner, receivedAtMicros: receivedAtMicros, limits: limits)
        }
    }

    private static func decodeDirect(
        _ scanner: inout JSONScanner, receivedAtMicros: Int64, limits: IngestLimits
    ) -> DecodedReport? {
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        var batchID: UUID128?
        var report: DecodedReport?
        repeat {
            switch scanner.string() {
            case "batch_id":
                guard batchID == nil, scanner.take(UInt8(ascii: ":")),
                    case .string(let text) = scanner.scalar(), let id = UUID128(text)
                else { return nil }
                batchID = id
            case "fixes":
                guard report == nil, scanner.take(UInt8(ascii: ":")),
                    let fixes = decodeFixes(&scanner, receivedAtMicros: receivedAtMicros, limits: limits)
                else { return nil }
                report = fixes
            default:
                return nil
            }
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "}")), scanner.atEnd(), let batchID, var report else { return nil }
        report.batchID = batchID
        return report
    }

    /// The array of fixes that comes next, decoded and validated; nil to give up.
    private static func decodeFixes(
        _ scanner: inout JSONScanner, receivedAtMicros: Int64, limits: IngestLimits
    ) -> DecodedReport? {
        guard scanner.take(UInt8(ascii: "[")), !scanner.take(UInt8(ascii: "]")) else { return nil }
        var report = DecodedReport(
            batchID: UUID128(high: 0, low: 0), fixes: [], rejections: [], rejectionCounts: [:])
        var index = 0
        repeat {
            guard index < limits.batchFixesMax, scanner.take(UInt8(ascii: "{")) else { return nil }
            var fields = FixFields()
            if !scanner.take(UInt8(ascii: "}")) {
                repeat {
                    guard let key = scanner.plainString().flatMap(FixFields.Member.init(named:)),
                        !fields.has(key), scanner.take(UInt8(ascii: ":")), let value = scanner.scalar()
                    else { return nil }
                    fields.set(key, value)
                } while scanner.take(UInt8(ascii: ","))
                guard scanner.take(UInt8(ascii: "}")) else { return nil }
            }
            do {
                report.fixes.append(try validate(fields, receivedAtMicros: receivedAtMicros, limits: limits))
            } catch {
                report.rejections.append(Rejection(index: UInt32(index), reason: error.reason))
                report.rejectionCounts[error.code, default: 0] += 1
            }
            index += 1
        } while scanner.take(UInt8(ascii: ","))
        guard scanner.take(UInt8(ascii: "]")) else { return nil }
        return report
    }
}

extension ReportDecoder.FixFields {
    /// A fix member, named by its bytes (`JSONScanner.plainString`) without making a String.
    enum Member: CaseIterable {
        case latitude, longitude, accuracy, altitude, speed, heading, battery, charging, source, recordedAt

        var name: StaticString {
            switch self {
            case .latitude: "latitude"
            case .longitude: "longitude"
            case .accuracy: "accuracy_m"
            case .altitude: "altitude_m"
            case .speed: "speed_mps"
            case .heading: "heading_deg"
            case .battery: "battery_pct"
            case .charging: "is_charging"
            case .source: "source"
            case .recordedAt: "recorded_at"
            }
        }

        init?(named bytes: UnsafeBufferPointer<UInt8>) {
            for member in Self.allCases {
                let name = member.name
                if name.utf8CodeUnitCount == bytes.count,
                    memcmp(name.utf8Start, bytes.baseAddress!, bytes.count) == 0
                {
                    self = member
                    return
                }
            }
            return nil
        }
    }

    mutating func set(_ member: Member, _ value: JSONValue) {
        switch member {
        case .latitude: latitude = value
        case .longitude: longitude = value
        case .accuracy: accuracy = value
        case .altitude: altitude = value
        case .speed: speed = value
        case .heading: heading = value
        case .battery: battery = value
        case .charging: charging = value
        case .source: source = value
        case .recordedAt: recordedAt = value
        }
    }

    func has(_ member: Member) -> Bool {
        switch member {
        case .latitude: latitude != nil
        case .longitude: longitude != nil
        case .accuracy: accuracy != nil
        case .altitude: altitude != nil
        case .speed: speed != nil
        case .heading: heading != nil
        case .battery: battery != nil
        case .charging: charging != nil
        case .source: source != nil
        case .recordedAt: recordedAt != nil
        }
    }
}
