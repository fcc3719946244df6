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
    private var base: Fix
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
