#if canImport(Glibc)
    import Glibc
#endif

/// One fix of a device's history as the track functions need it: where, how sure, and when by the
/// device's clock.
public struct TrackPoint: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    /// The radius of the fix's uncertainty in metres; nil (or not a positive finite number) when
    /// unknown.
    public var accuracyMeters: Double?
    public var recordedAtMicros: Int64
    /// The device's clock was ahead of the server's when this fix arrived: its time cannot be trusted.
    public var clockSuspect: Bool

    public init(
        latitude: Double, longitude: Double, accuracyMeters: Double?, recordedAtMicros: Int64,
        clockSuspect: Bool = false
    ) {
        self.latitude = latitude
        self.longitude = longitude
        self.accuracyMeters = accuracyMeters
        self.recordedAtMicros = recordedAtMicros
        self.clockSuspect = clockSuspect
    }

    /// The accuracy when it is a usable radius.
    var knownAccuracy: Double? {
        guard let accuracy = accuracyMeters, accuracy.isFinite, accuracy > 0 else { return nil }
        return accuracy
    }
}

/// Distances on the scale of a day's movements: an equirectangular projection around the two
/// points' mean latitude. Over a few kilometres its error against the great circle is far below a
/// phone fix's accuracy; over a long move it is summed from short steps.
enum Geodesy {
    static let earthRadiusMeters = 6_371_008.8

    static func distanceMeters(
        _ latitudeA: Double, _ longitudeA: Double, _ latitudeB: Double, _ longitudeB: Double
    ) -> Double {
        let meanLatitude = (latitudeA + latitudeB) / 2 * .pi / 180
        var deltaLongitude = longitudeB - longitudeA
        // The short way round across the antimeridian.
        if deltaLongitude > 180 { deltaLongitude -= 360 }
        if deltaLongitude < -180 { deltaLongitude += 360 }
        let dx = deltaLongitude * .pi / 180 * cos(meanLatitude) * earthRadiusMeters
        let dy = (latitudeB - latitudeA) * .pi / 180 * earthRadiusMeters
        return (dx * dx + dy * dy).squareRoot()
    }

    static func distanceMeters(_ a: TrackPoint, _ b: TrackPoint) -> Double {
        distanceMeters(a.latitude, a.longitude, b.latitude, b.longitude)
    }
}
