import Foundation

/// An NMEA 0183 track as the tests read it: the epochs of its RMC and GGA sentences (what a
/// receiver said each second), and the same track moved in time.
public struct NMEATrack: Sendable {
    /// One second of the track: RMC's time, position, speed and course, GGA's altitude.
    public struct Epoch: Sendable, Equatable {
        /// Microseconds since 1970 (UTC), from RMC's date and time.
        public var timeMicros: Int64
        public var latitude: Double
        public var longitude: Double
        public var speedMetersPerSecond: Double
        public var courseDegrees: Double
        /// Above mean sea level (GGA), when the epoch has a GGA sentence.
        public var altitudeMeters: Double?
    }

    /// The file's lines, comments and sentences, without their line ends.
    public var lines: [String]

    public init(path: String) throws {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        lines = text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }).map(String.init)
    }

    /// The track's epochs in order.
    public var epochs: [Epoch] {
        var epochs: [Epoch] = []
        for line in lines {
            guard let fields = Self.fields(line) else { continue }
            if fields[0].hasSuffix("RMC"), fields.count >= 10 {
                epochs.append(
                    Epoch(
                        timeMicros: Self.micros(time: fields[1], date: fields[9]),
                        latitude: Self.degrees(fields[3], hemisphere: fields[4]),
                        longitude: Self.degrees(fields[5], hemisphere: fields[6]),
                        speedMetersPerSecond: (Double(fields[7]) ?? 0) * 1852 / 3600,
                        courseDegrees: Double(fields[8]) ?? 0, altitudeMeters: nil))
            } else if fields[0].hasSuffix("GGA"), fields.count >= 10, !epochs.isEmpty {
                epochs[epochs.count - 1].altitudeMeters = Double(fields[9])
            }
        }
        return epochs
    }

    /// The track with every epoch moved so that the first is at `startMicros` (whole seconds),
    /// each sentence's time, RMC's date and its checksum rewritten: gpsd reports a fix at the time
    /// the receiver says, and a server refuses fixes older than its retention window.
    public func movedTo(startMicros: Int64) -> NMEATrack {
        guard let first = epochs.first else { return self }
        let shift = startMicros - first.timeMicros
        var moved = self
        var currentDate = ""
        moved.lines = lines.map { line in
            guard var fields = Self.fields(line) else { return line }
            if fields[0].hasSuffix("RMC"), fields.count >= 10 {
                currentDate = fields[9]
            }
            guard fields[0].hasSuffix("RMC") || fields[0].hasSuffix("GGA"), !currentDate.isEmpty else {
                return line
            }
            let (time, date) = Self.format(micros: Self.micros(time: fields[1], date: currentDate) + shift)
            fields[1] = time
            if fields[0].hasSuffix("RMC") { fields[9] = date }
            let body = fields.joined(separator: ",")
            return "$" + body + "*" + Self.checksum(body)
        }
        return moved
    }

    /// Writes the track with NMEA's CR LF line ends (comments with LF, as gpsd's own logs).
    public func write(to path: String) throws {
        let text = lines.map { $0.hasPrefix("$") ? $0 + "\r\n" : $0 + "\n" }.joined()
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// A sentence's fields (the talker and type first) when its checksum is right; nil otherwise.
    static func fields(_ line: String) -> [String]? {
        guard line.hasPrefix("$"), let star = line.lastIndex(of: "*") else { return nil }
        let body = String(line[line.index(after: line.startIndex)..<star])
        guard String(line[line.index(after: star)...]) == checksum(body) else { return nil }
        return body.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
    }

    /// The XOR of every byte between `$` and `*`, as two upper-case hex digits.
    public static func checksum(_ body: String) -> String {
        String(format: "%02X", body.utf8.reduce(UInt8(0), ^))
    }

    static func degrees(_ text: String, hemisphere: String) -> Double {
        guard let value = Double(text) else { return .nan }
        let whole = (value / 100).rounded(.down)
        let degrees = whole + (value - whole * 100) / 60
        return hemisphere == "S" || hemisphere == "W" ? -degrees : degrees
    }

    static func micros(time: String, date: String) -> Int64 {
        let digits = Array(date.utf8).map { Int64($0) - 48 }
        let day = digits[0] * 10 + digits[1]
        let month = digits[2] * 10 + digits[3]
        let year = 2000 + digits[4] * 10 + digits[5]
        var components = DateComponents()
        components.timeZone = TimeZone(identifier: "UTC")
        components.year = Int(year)
        components.month = Int(month)
        components.day = Int(day)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let midnight = calendar.date(from: components)!.timeIntervalSince1970
        let hours = Double(time.prefix(2))!
        let minutes = Double(time.dropFirst(2).prefix(2))!
        let seconds = Double(time.dropFirst(4))!
        return Int64(((midnight + hours * 3600 + minutes * 60 + seconds) * 1_000_000).rounded())
    }

    /// `hhmmss.ss` and `ddmmyy` of a UTC time.
    static func format(micros: Int64) -> (time: String, date: String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let date = Date(timeIntervalSince1970: Double(micros) / 1_000_000)
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let hundredths = (micros % 1_000_000) / 10_000
        return (
            String(format: "%02d%02d%02d.%02d", parts.hour!, parts.minute!, parts.second!, hundredths),
            String(format: "%02d%02d%02d", parts.day!, parts.month!, parts.year! % 100)
        )
    }
}

extension NMEATrack {
    /// Fixtures/agent/track.nmea: a synthetic walk of 60 one-second epochs (ops/tests/nmea_track.py).
    public static let fixturePath =
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fixtures/agent/track.nmea").path
}
