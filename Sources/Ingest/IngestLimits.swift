import HTTPClient
import Identity

/// Every limit the report path enforces, each with its unit last, beside the limits of the callers
/// and their sessions (`identity`, which `IdentityService` enforces; read and set through this value
/// as if they were its own, `limits.sessionIdleSecondsMax`). Defaults and what happens over each
/// limit are in docs/api.md and docs/configuration.md.
@dynamicMemberLookup
public struct IngestLimits: Sendable {
    /// Sessions, logins, names and the registry's memory of batches: what `IdentityService` enforces.
    public var identity = IdentityLimits()
    /// Which addresses the server's requests to URLs its users gave (geofence webhooks and ntfy
    /// topics, UnifiedPush endpoints) may go to: public ones, and the blocks of
    /// `--allow-private-targets` (docs/configuration.md).
    public var outgoingTargets = AddressPolicy()

    /// A report with more fixes answers 413 `too_many_fixes`. A phone off-grid for a day at one fix
    /// a minute queues 1,440; the headroom covers a week at that rate.
    public var batchFixesMax = 10_000
    /// A larger request body answers 413 `body_too_large` (enforced by the HTTP server). A fix is
    /// about 250 bytes of JSON, so a full batch is about 2.5 MB.
    public var bodyBytesMax = 8 << 20
    /// A `recorded_at` later than `received_at` by more than this is accepted and flagged
    /// clock-suspect (DESIGN.md, "Time").
    public var clockSkewToleranceSeconds = 300
    /// A fix older than this, counted from the earlier of `recorded_at` and `received_at`, is
    /// rejected as expired: it would be deleted by the retention job anyway.
    public var retentionDays = 30
    /// Bytes of a push token (an UnifiedPush endpoint is a URL).
    public var pushTokenBytesMax = 4096

    // The fields of a fix (docs/api.md, "Fix rules"). Physical bounds rather than settings, so
    // they are constants: a fix outside them is rejected on its own (`out_of_range`) and the rest of
    // its batch is kept. Every value inside them can be stored, projected and drawn; values from
    // logs written before they existed are drawn without trapping all the same
    // (docs/architecture.md, "Failure containment").

    public static let latitudeDegreesMin = -90.0
    public static let latitudeDegreesMax = 90.0
    public static let longitudeDegreesMin = -180.0
    public static let longitudeDegreesMax = 180.0
    /// Accuracy must be greater than 0 (a radius of 0 claims a certainty no receiver has) and at most
    /// this: 1,000 km covers the coarsest fix anyone sends (a country-sized cell or IP lookup);
    /// beyond it a fix says nothing about where the device is.
    public static let accuracyMetersMax = 1_000_000.0
    /// The smallest accuracy a fix may claim: 1 cm, finer than any receiver a phone or a laptop
    /// carries. A smaller positive number (1e-320, a denormal) is not a measurement but a value
    /// that would be drawn and judged as certainty.
    public static let accuracyMetersMin = 0.01
    /// Below the deepest ocean floor (the Challenger Deep is about -10,935 m).
    public static let altitudeMetersMin = -12_000.0
    /// The Kármán line: higher is space, not a device someone lost.
    public static let altitudeMetersMax = 100_000.0
    public static let speedMetersPerSecondMin = 0.0
    /// About Mach 6: above every aircraft a phone travels in. iOS's -1 ("unknown") is sent as absent.
    public static let speedMetersPerSecondMax = 2_000.0
    public static let headingDegreesMin = 0.0
    /// Exclusive: 360 is 0 and must be sent as 0, so that one direction has one value.
    public static let headingDegreesMax = 360.0
    /// Battery is kept as a whole percentage (a fractional value is rounded).
    public static let batteryPercentMin = 0.0
    public static let batteryPercentMax = 100.0

    public init() {}

    public subscript<Value>(dynamicMember path: WritableKeyPath<IdentityLimits, Value>) -> Value {
        get { identity[keyPath: path] }
        set { identity[keyPath: path] = newValue }
    }

    public var retentionMicros: Int64 { Int64(retentionDays) * 86_400 * 1_000_000 }
    public var clockSkewToleranceMicros: Int64 { Int64(clockSkewToleranceSeconds) * 1_000_000 }
}
