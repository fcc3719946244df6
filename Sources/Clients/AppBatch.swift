import Crypto
import Events
import Identity
import Ingest

/// A fix as an app sent it, already in findmy's units (metres, metres per second, degrees,
/// percent, UTC), before the fix rules of docs/api.md are applied: a `Fix` (its members read and
/// written through this one) whose battery is kept as sent, before rounding, so that the range
/// rule sees what was sent.
@dynamicMemberLookup
public struct AppFix: Equatable, Sendable {
    /// Every member but the battery (which stays nil here) and `clockSuspect` (set by ingest).
    fileprivate var base: Fix
    /// Before rounding; `fix()` checks its range and rounds it into the `Fix`.
    public var batteryPercent: Double?

    public init(latitude: Double, longitude: Double, source: String, recordedAtMicros: Int64) {
        base = Fix(
            latitude: latitude, longitude: longitude, accuracyMeters: nil, source: source,
            recordedAtMicros: recordedAtMicros)
    }

    public subscript<Value>(dynamicMember member: WritableKeyPath<Fix, Value>) -> Value {
        get { base[keyPath: member] }
        set { base[keyPath: member] = newValue }
    }
}

/// What one app request holds, in request order: fixes with their index in the request (the
/// element of Overland's `locations`, 0 for the OsmAnd protocol's one fix), items that cannot be a
/// fix with their reason, and how many items were not fixes at all (Overland's trip records and
/// pause actions), which are acknowledged and not stored.
public struct AppBatch: Equatable, Sendable {
    public struct Item: Equatable, Sendable {
        public var index: Int
        public var fix: AppFix
    }

    public var fixes: [Item] = []
    public var rejections: [AppRejection] = []
    public var skipped = 0

    public init() {}

    /// Adds item `index` of the request as `read` finds it: a fix, not a fix at all (nil), or a
    /// rejection.
    mutating func add(_ index: Int, _ read: () throws(FixRejection) -> AppFix?) {
        do {
            if let fix = try read() {
                fixes.append(Item(index: index, fix: fix))
            } else {
                skipped += 1
            }
        } catch {
            rejections.append(AppRejection(index: index, error.code, error.detail))
        }
    }
}

/// An item of an app's request that can never be a fix, with the reason the arrivals audit shows.
public struct AppRejection: Equatable, Sendable {
    public var index: Int
    public var rejection: FixRejection

    public init(index: Int, _ code: FixRejection.Code, _ detail: String) {
        self.index = index
        self.rejection = FixRejection(code, detail)
    }
}

extension AppFix {
    /// The fix the report path validates. The battery is the one value whose range is checked
    /// here: `Fix` holds it as a whole percentage, and the rule must see it before rounding (as
    /// the native decoder does: 100.4 is refused).
    func fix() throws(FixRejection) -> Fix {
        var fix = base
        if let battery = batteryPercent {
            guard battery >= IngestLimits.batteryPercentMin, battery <= IngestLimits.batteryPercentMax else {
                throw FixRejection(.outOfRange, "battery_pct must be within [0, 100], got \(battery)")
            }
            // In range, so the conversion cannot trap.
            fix.batteryPercent = UInt8(battery.rounded())
        }
        return fix
    }
}

extension AppBatch {
    /// This batch as the report path's `ClientReport`; indexes past `UInt32` cannot occur (the
    /// decoders refuse more than `batchFixesMax` items first). `receivedAtMicros`: the arrival
    /// time the decoder dated fixes without a time by, so that the report path stamps the same.
    func clientReport(
        deviceID: UInt64, batchID: UUID128, clientProtocol: ClientProtocol, receivedAtMicros: Int64? = nil
    ) -> ClientReport {
        var items: [ClientReport.Item] = []
        items.reserveCapacity(fixes.count)
        var refused = rejections.map { ClientReport.ItemRejection(index: UInt32($0.index), $0.rejection) }
        for item in fixes {
            do {
                items.append(ClientReport.Item(index: UInt32(item.index), fix: try item.fix.fix()))
            } catch {
                refused.append(ClientReport.ItemRejection(index: UInt32(item.index), error))
            }
        }
        return ClientReport(
            deviceID: deviceID, batchID: batchID, clientProtocol: clientProtocol, items: items,
            rejections: refused, receivedAtMicros: receivedAtMicros)
    }
}

extension AppBatch {
    /// The batch id of a request whose app sends none, made from what was decoded of it rather
    /// than from its bytes: a version-4-shaped UUID of the first 16 bytes of SHA-256 over
    /// `device id (u64 LE) ‖ protocol number (u8) ‖ 0x01 ‖ the batch` (`encodedForBatchID`).
    ///
    /// What makes two requests the same: the same device and protocol, and the same fixes in the same
    /// order (each with its position in the request and every value findmy keeps, as decoded, the
    /// battery before rounding) and the same refused items (position, code, detail). A
    /// byte-identical resend decodes to the same batch, so it is a duplicate as before; so is a
    /// resend that differs only in what is not read (whitespace, member order, Overland's `current`
    /// and `trip`, which describe the phone when it sends, `wifi`, `motion`).
    ///
    /// Why not the body: hashing 1,000 of Overland's locations (about 400 bytes each) cost a tenth
    /// of the request; the decoded batch is about 80 bytes a fix (docs/benchmarks.md).
    ///
    /// Why collisions are no practical risk: a batch id is looked up per device only
    /// (`Registry.batchResult(deviceID:batchID:)`), so two requests can only be confused when they
    /// come from the same device. By accident: 122 bits of SHA-256, so even 10^9 batches of one
    /// device collide with a probability below 10^-18. On purpose: finding two batches with the
    /// same SHA-256 prefix takes about 2^61 hashes, and only someone holding that device's token can
    /// post to it, who could as well post any fix they like. The encoding is injective (counts and
    /// lengths before variable parts, a presence byte before optional values), so different batches
    /// hash different bytes; and the `0x01` after the protocol number cannot begin a body that the
    /// decoders accept (JSON starts with `{` or whitespace), so no id of the old body-hashing
    /// derivation (same prefix, then the body) is the id of a decoded batch.
    public func derivedBatchID(deviceID: UInt64, clientProtocol: ClientProtocol) -> UUID128 {
        ClientReport.batchID(
            digest: SHA256.hash(encodedForBatchID(deviceID: deviceID, clientProtocol: clientProtocol)))
    }

    /// The bytes `derivedBatchID` hashes, little-endian throughout (docs/clients.md, "Resends"):
    /// - `device id` u64, `protocol number` u8, `0x01` (this encoding's form);
    /// - u32 count of fixes, then per fix: u32 position, i64 `recordedAtMicros`, the bits of
    ///   latitude and longitude (u64 each), a presence byte (bit 0 accuracy, 1 altitude, 2 speed, 3
    ///   heading, 4 battery, 5 `isCharging` known, 6 `isCharging`, 7 `clockSuspect`), the bits of
    ///   each present value in that order (u64 each; the battery is the percentage as decoded,
    ///   before rounding), u32 length and the UTF-8 of `source`;
    /// - u32 count of rejections, then per rejection: u32 position, u32 length and UTF-8 of the
    ///   code, u32 length and UTF-8 of the detail.
    /// Adding a member to `Fix` means adding it here (DerivedBatchIDTests counts `Fix`'s members).
    func encodedForBatchID(deviceID: UInt64, clientProtocol: ClientProtocol) -> [UInt8] {
        var capacity = 8 + 1 + 1 + 4 + 4
        for item in fixes { capacity += Self.encodedFixBytesMax + item.fix.source.utf8.count }
        for item in rejections {
            capacity += 12 + item.rejection.code.rawValue.utf8.count + item.rejection.detail.utf8.count
        }
        return [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            var out = ByteOutput(base: buffer.baseAddress!)
            out.word(deviceID)
            out.byte(clientProtocol.rawValue)
            out.byte(0x01)
            out.count(fixes.count)
            for item in fixes {
                out.count(item.index)
                let fix = item.fix.base
                out.word(UInt64(bitPattern: fix.recordedAtMicros))
                out.word(fix.latitude.bitPattern)
                out.word(fix.longitude.bitPattern)
                let battery = item.fix.batteryPercent
                var presence: UInt8 = 0
                if fix.accuracyMeters != nil { presence |= 1 }
                if fix.altitudeMeters != nil { presence |= 1 << 1 }
                if fix.speedMetersPerSecond != nil { presence |= 1 << 2 }
                if fix.headingDegrees != nil { presence |= 1 << 3 }
                if battery != nil { presence |= 1 << 4 }
                if let charging = fix.isCharging { presence |= charging ? 0b110_0000 : 0b010_0000 }
                if fix.clockSuspect { presence |= 1 << 7 }
                out.byte(presence)
                out.word(fix.accuracyMeters)
                out.word(fix.altitudeMeters)
                out.word(fix.speedMetersPerSecond)
                out.word(fix.headingDegrees)
                out.word(battery)
                out.text(fix.source)
            }
            out.count(rejections.count)
            for item in rejections {
                out.count(item.index)
                out.text(item.rejection.code.rawValue)
                out.text(item.rejection.detail)
            }
            precondition(out.written <= capacity, "encodedForBatchID wrote past its capacity")
            initialized = out.written
        }
    }

    /// A fix's encoded bytes but its source's text: position, time, two coordinates, presence,
    /// five optional values, the source's length.
    static let encodedFixBytesMax = 4 + 8 + 8 + 8 + 1 + 5 * 8 + 4
}

/// Little-endian writes into memory sized beforehand (`encodedForBatchID` counts it).
private struct ByteOutput {
    let base: UnsafeMutablePointer<UInt8>
    var written = 0

    mutating func byte(_ value: UInt8) {
        base[written] = value
        written += 1
    }

    mutating func word(_ value: UInt64) {
        UnsafeMutableRawPointer(base + written).storeBytes(of: value.littleEndian, as: UInt64.self)
        written += 8
    }

    /// A present value's bits; nothing for an absent one (the presence byte says which).
    mutating func word(_ value: Double?) {
        if let value { word(value.bitPattern) }
    }

    /// A count or a position: below `batchFixesMax`, or a string's length, so within u32.
    mutating func count(_ value: Int) {
        UnsafeMutableRawPointer(base + written).storeBytes(of: UInt32(value).littleEndian, as: UInt32.self)
        written += 4
    }

    mutating func text(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            count(utf8.count)
            if let source = utf8.baseAddress { (base + written).update(from: source, count: utf8.count) }
            written += utf8.count
        }
    }
}
