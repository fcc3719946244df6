import Events

/// A small, fast, seedable generator (SplitMix64), so that benchmarks and tests replay exactly.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }

    /// A standard normal sample (Box–Muller).
    public mutating func gaussian() -> Double {
        let u1 = Double.random(in: Double.ulpOfOne..<1, using: &self)
        let u2 = Double.random(in: 0..<1, using: &self)
        return (-2 * logApprox(u1)).squareRoot() * cosApprox(2 * Double.pi * u2)
    }
}

// Foundation-free log and cos, accurate enough for noise.
private func logApprox(_ x: Double) -> Double {
    var exponent = 0
    var mantissa = x
    while mantissa < 0.5 {
        mantissa *= 2
        exponent -= 1
    }
    while mantissa >= 1 {
        mantissa /= 2
        exponent += 1
    }
    let t = (mantissa - 1) / (mantissa + 1)
    var sum = 0.0
    var power = t
    var k = 1.0
    for _ in 0..<20 {
        sum += power / k
        power *= t * t
        k += 2
    }
    return 2 * sum + Double(exponent) * 0.693_147_180_559_945_3
}

private func cosApprox(_ x: Double) -> Double {
    var angle = x.truncatingRemainder(dividingBy: 2 * Double.pi)
    if angle > Double.pi { angle -= 2 * Double.pi }
    var term = 1.0
    var sum = 1.0
    for n in 1..<12 {
        term *= -angle * angle / Double((2 * n - 1) * (2 * n))
        sum += term
    }
    return sum
}

private func sinApprox(_ x: Double) -> Double { cosApprox(x - Double.pi / 2) }

/// A realistic phone track: a random walk that switches between standing still, walking and
/// driving, with GPS noise, accuracy that varies with the mode, battery drain and charging, and
/// values rounded the way phones report them (7 decimals for coordinates, 1 for altitude).
/// Not uniform random numbers: the benchmarks' bytes-per-fix figure depends on that.
public struct TrackGenerator: Sendable {
    public enum Mode: Sendable { case still, walking, driving }

    private var random: SeededGenerator
    private var latitude: Double
    private var longitude: Double
    private var altitude: Double
    private var headingDegrees: Double
    private var battery: Double
    private var charging = false
    private var mode: Mode = .walking
    private var fixesLeftInMode = 0
    public private(set) var timeMicros: Int64

    public init(seed: UInt64, startMicros: Int64) {
        random = SeededGenerator(seed: seed)
        latitude = Double.random(in: 47.5...54.5, using: &random)
        longitude = Double.random(in: 6.0...14.5, using: &random)
        altitude = Double.random(in: 20...400, using: &random)
        headingDegrees = Double.random(in: 0..<360, using: &random)
        battery = Double.random(in: 40...100, using: &random)
        timeMicros = startMicros
    }

    private static func rounded(_ value: Double, _ scale: Double) -> Double {
        (value * scale).rounded() / scale
    }

    public mutating func next() -> Fix {
        if fixesLeftInMode == 0 {
            mode = [Mode.still, .walking, .walking, .driving].randomElement(using: &random)!
            fixesLeftInMode = Int.random(in: 20...200, using: &random)
        }
        fixesLeftInMode -= 1
        let (speed, intervalSeconds, accuracyChoices): (Double, Double, [Double]) =
            switch mode {
            case .still: (0, 300, [5, 10, 16, 32, 65])
            case .walking: (1.2 + 0.3 * random.gaussian(), 60, [5, 8, 10, 12, 16])
            case .driving: (13 + 4 * random.gaussian(), 5, [3, 5, 5, 8, 10])
            }
        let interval = intervalSeconds * Double.random(in: 0.9...1.1, using: &random)
        timeMicros += Int64(interval * 1_000_000)
        headingDegrees = (headingDegrees + 15 * random.gaussian() + 360).truncatingRemainder(dividingBy: 360)
        let distance = max(0, speed) * interval
        let radians = headingDegrees * Double.pi / 180
        latitude += distance * cosApprox(radians) / 111_320
        longitude += distance * sinApprox(radians) / (111_320 * cosApprox(latitude * Double.pi / 180))
        altitude += 0.5 * random.gaussian()
        let accuracy = accuracyChoices.randomElement(using: &random)!
        let noise = accuracy / 3
        if charging {
            battery = min(100, battery + 0.5)
            if battery >= 100 { charging = Int.random(in: 0..<20, using: &random) != 0 }
        } else {
            battery -= 0.05
            if battery < 15 { charging = true }
        }
        let hasMotion = mode != .still
        return Fix(
            latitude: Self.rounded(latitude + noise * random.gaussian() / 111_320, 1e7),
            longitude: Self.rounded(longitude + noise * random.gaussian() / 71_000, 1e7),
            accuracyMeters: accuracy,
            altitudeMeters: Self.rounded(altitude, 10),
            speedMetersPerSecond: hasMotion ? Self.rounded(max(0, speed), 100) : nil,
            // Rounding 359.96 gives 360, which ingest refuses (heading_deg is within [0, 360)).
            headingDegrees: hasMotion
                ? Self.rounded(headingDegrees, 10).truncatingRemainder(dividingBy: 360) : nil,
            batteryPercent: UInt8(max(0, min(100, battery))),
            isCharging: charging,
            source: mode == .still ? "visit" : "significant",
            recordedAtMicros: timeMicros)
    }

    public mutating func next(_ count: Int) -> [Fix] {
        (0..<count).map { _ in next() }
    }
}
