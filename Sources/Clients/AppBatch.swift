import Events
import Ingest

/// A fix as an app sent it, already in findmy's units (metres, metres per second, degrees,
/// percent, UTC), before the fix rules of docs/api.md are applied.
public struct AppFix: Equatable, Sendable {
    public var latitude: Double
    public var longitude: Double
    /// nil: unknown (the app sent none, 0, or a value that means "invalid").
    public var accuracyMeters: Double?
    public var altitudeMeters: Double?
    public var speedMetersPerSecond: Double?
    public var headingDegrees: Double?
    /// Before rounding, so that the range rule sees what was sent.
    public var batteryPercent: Double?
    public var isCharging: Bool?
    public var source: String
    public var recordedAtMicros: Int64

    public init(
        latitude: Double, longitude: Double, accuracyMeters: Double? = nil, altitudeMeters: Double? = nil,
        speedMetersPerSecond: Double? = nil, headingDegrees: Double? = nil, batteryPercent: Double? = nil,
        isCharging: Bool? = nil, source: String, recordedAtMicros: Int64
    ) {
        self.latitude = latitude
        self.longitude = longitude
        self.accuracyMeters = accuracyMeters
        self.altitudeMeters = altitudeMeters
        self.speedMetersPerSecond = speedMetersPerSecond
        self.headingDegrees = headingDegrees
        self.batteryPercent = batteryPercent
        self.isCharging = isCharging
        self.source = source
        self.recordedAtMicros = recordedAtMicros
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
