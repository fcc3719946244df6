import Events
import JSON

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
    ///    unknown, repeated or an object or array, and any JSON syntax error;
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
                    guard let key = scanner.string(), !fields.has(key), scanner.take(UInt8(ascii: ":")),
                        let value = scanner.scalar(), fields.set(key, value)
                    else { return nil }
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
