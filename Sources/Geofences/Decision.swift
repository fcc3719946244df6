#if canImport(Glibc)
    import Glibc
#endif

/// Where a fix puts a device with respect to one fence, judged by its whole accuracy circle
/// (docs/geofences.md, "The decision"):
///
/// | condition | decision |
/// | --- | --- |
/// | accuracy unknown | undecided |
/// | distance + accuracy <= radius | inside: the whole circle is in the fence |
/// | distance - accuracy > radius | outside: the whole circle is out of it |
/// | otherwise | undecided: the circle straddles the edge |
///
/// An undecided fix never changes a device's state, so a position that wanders near the edge with
/// a wide circle cannot make "left home" / "arrived home" flap.
public enum GeofenceDecision: UInt8, Sendable, Equatable {
    case undecided = 0
    case inside = 1
    case outside = 2

    /// The rule on the numbers themselves, so that every boundary is tested exactly.
    public static func decide(distanceMeters: Double, accuracyMeters: Double?, radiusMeters: Double)
        -> GeofenceDecision
    {
        // Unknown (nil), or a value no sensor reports: never decides. NaN fails every comparison.
        guard let accuracy = accuracyMeters, accuracy > 0, accuracy.isFinite, distanceMeters.isFinite else {
            return .undecided
        }
        if distanceMeters + accuracy <= radiusMeters { return .inside }
        if distanceMeters - accuracy > radiusMeters { return .outside }
        return .undecided
    }
}

/// A fence's circle, with what evaluating it needs per fix computed once.
public struct GeofenceCircle: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    public var radiusMeters: Double
    let latitudeRadians: Double
    let longitudeRadians: Double
    let cosLatitude: Double

    /// The mean Earth radius (IUGG), the sphere distances are measured on. Over a fence's size the
    /// sphere's error against the ellipsoid (<0.5 %) is far below a phone fix's accuracy.
    public static let earthRadiusMeters = 6_371_008.8

    public init(latitude: Double, longitude: Double, radiusMeters: Double) {
        self.latitude = latitude
        self.longitude = longitude
        self.radiusMeters = radiusMeters
        latitudeRadians = latitude * .pi / 180
        longitudeRadians = longitude * .pi / 180
        cosLatitude = cos(latitudeRadians)
    }

    /// Great-circle distance (haversine) from the centre to a point, in metres.
    public func distanceMeters(latitude: Double, longitude: Double) -> Double {
        let phi = latitude * .pi / 180
        let dPhi = phi - latitudeRadians
        let dLambda = longitude * .pi / 180 - longitudeRadians
        let a = sin(dPhi / 2) * sin(dPhi / 2) + cosLatitude * cos(phi) * sin(dLambda / 2) * sin(dLambda / 2)
        return 2 * Self.earthRadiusMeters * asin(min(1, sqrt(a)))
    }

    /// The decision for a fix at (`latitude`, `longitude`) with `accuracyMeters`.
    public func decide(latitude: Double, longitude: Double, accuracyMeters: Double?) -> GeofenceDecision {
        guard let accuracy = accuracyMeters, accuracy > 0, accuracy.isFinite else { return .undecided }
        // The great-circle distance is at least the arc between the two latitudes: when that alone
        // puts the whole circle outside, no trigonometry is needed. Most fixes are far from most fences.
        let latitudeArc = abs(latitude * .pi / 180 - latitudeRadians) * Self.earthRadiusMeters
        if latitudeArc - accuracy > radiusMeters { return .outside }
        return GeofenceDecision.decide(
            distanceMeters: distanceMeters(latitude: latitude, longitude: longitude),
            accuracyMeters: accuracy,
            radiusMeters: radiusMeters)
    }
}

/// One device's state with respect to one fence, and the fold that turns its fixes, in
/// `recorded_at` order, into transitions. Pure: the projection keeps one per (fence, device) and
/// stores it, and replays fixes through it from any point when a late batch inserts earlier ones.
///
/// The first decided fix sets the state without a transition: a device found inside a fence drawn
/// around it did not "enter" it then. Every later decided fix that differs from the state is a
/// transition at that fix's time; an undecided fix changes nothing.
public struct GeofencePairState: Sendable, Equatable {
    public enum Known: UInt8, Sendable {
        case inside = 1
        case outside = 2
    }

    /// The state after the last fix folded (`horizonMicros`): always the decision of the latest
    /// decided fix; nil before any.
    public var current: Known?
    /// The `recorded_at` of the latest fix folded, decided or not; `Int64.min` before any. A fix
    /// recorded before it is out of order and needs a recompute rather than a fold.
    public var horizonMicros: Int64 = .min

    public init() {}

    /// Folds one fix (which must not be before `horizonMicros`). Returns the transition it makes:
    /// `.inside` for an enter, `.outside` for a leave, nil for none.
    public mutating func fold(_ decision: GeofenceDecision, recordedAtMicros: Int64) -> Known? {
        precondition(recordedAtMicros >= horizonMicros, "fixes are folded in recorded_at order")
        horizonMicros = recordedAtMicros
        let decided: Known
        switch decision {
        case .undecided: return nil
        case .inside: decided = .inside
        case .outside: decided = .outside
        }
        guard let state = current else {
            current = decided
            return nil
        }
        guard state != decided else { return nil }
        current = decided
        return decided
    }
}
