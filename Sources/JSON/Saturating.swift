/// Conversions of stored or received numbers that cannot trap.
///
/// `Int(someDouble)` traps on NaN, on infinities and past the integer's range, and `JSONWriter.double`
/// refuses non-finite values with a precondition; in this server any trap ends the whole process,
/// report acceptance included (docs/architecture.md, "Failure containment"). Ingest keeps every fix
/// field in a physical range (`IngestLimits`), but a log written before a range existed, or
/// PostgreSQL, can hold anything a double can. So code that shows such a value converts it with
/// these, the one place that decides what an outsized value becomes.
extension FixedWidthInteger {
    /// `value` rounded toward zero and clamped to this type's range (1e308 gives `max`, -infinity
    /// `min`); nil for NaN, which has no sensible integer.
    public init?(saturating value: Double) {
        guard !value.isNaN else { return nil }
        // Double(min) is exact (0 or a power of two). Double(max) rounds up to a power of two for
        // the 64-bit types, so `>=` also catches the values between max and it, which would trap.
        if value <= Double(Self.min) {
            self = Self.min
        } else if value >= Double(Self.max) {
            self = Self.max
        } else {
            self.init(value)
        }
    }
}

extension RFC3339 {
    /// `micros` clamped to the years RFC 3339 text is written for (0001-9999): formatting traps
    /// outside them. Ingest accepts only those years, but PostgreSQL keeps times up to 294276 AD.
    public static func clampedMicros(_ micros: Int64) -> Int64 {
        min(max(micros, microsMin), microsMax)
    }
}

extension JSONWriter {
    /// `value`, or null when it is not finite: JSON has no NaN or infinity, and a reader told
    /// "no value" is better served than a server that stops.
    public mutating func finiteDouble(_ value: Double) {
        if value.isFinite { double(value) } else { null() }
    }
}

extension JSONFlatObject {
    /// `value`, or null when it is not finite (see `JSONWriter.finiteDouble`).
    public mutating func finiteDouble(_ value: Double) {
        if value.isFinite { double(value) } else { null() }
    }
}
