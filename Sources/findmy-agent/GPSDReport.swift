// gpsd's JSON reports read into fixes: a pure decoder, so that every rule of it is a test with
// gpsd's own lines as input (AgentTests), and the socket in GPSD.swift only moves bytes.
import FindMyClient
import JSON

/// One TPV ("time-position-velocity") report of gpsd's JSON protocol (gpsd_json(5)) as a fix.
///
/// What is taken, and why:
/// - only `"class":"TPV"` with `mode` 2 (2-D) or 3 (3-D) and numeric `lat`, `lon` in range;
/// - `time` (the receiver's, RFC 3339) as the fix's time: a GPS receiver's clock is right where the
///   machine's may not be (a Raspberry Pi without a real-time clock); the machine's clock only when
///   gpsd gives none;
/// - accuracy: gpsd's error model gives 95 % figures (its UERE constants are 95 % values), the
///   report's `accuracy_m` is a 68 % radius (as Core Location's). `eph` is a horizontal 95 %
///   radius: for a circular normal error the 68 % radius is 1.5096 σ and the 95 % one 2.4477 σ.
///   Without `eph`, `epx` and `epy` are 95 % half-widths along each axis (1.96 σ each). Without
///   any of them the report is no fix: the server requires `accuracy_m`, and inventing one would
///   claim a certainty the receiver never stated;
/// - altitude above mean sea level, as the report's `altitude_m` (and OwnTracks, Core Location):
///   `altMSL`, else the older `alt`, else `altHAE` − `geoidSep` when both are there;
/// - `speed` (m/s) and `track` (degrees true; 360 sent as 0, the server's range is [0, 360)).
enum GPSDReport {
    static let radius68PerRadius95 = 1.5096 / 2.4477
    static let radius68PerAxisSigma = 1.5096
    static let axis95PerSigma = 1.96

    /// The fix a line of gpsd's output says, or nil when it says none (another report class, no
    /// fix yet, no error estimate, not JSON).
    static func fix(line: [UInt8], nowMicros: () -> Int64 = ClientClock.nowMicros) -> ClientFix? {
        guard !line.isEmpty, case .object(let report)? = try? JSONParser.parse(line),
            report["class"] == .string("TPV"),
            let mode = number(report["mode"]), mode >= 2,
            let latitude = number(report["lat"]), (-90...90).contains(latitude),
            let longitude = number(report["lon"]), (-180...180).contains(longitude),
            let accuracy = accuracyMeters(report), accuracy > 0
        else { return nil }
        var recordedAt = nowMicros()
        if case .string(let time)? = report["time"], let micros = try? RFC3339.parseMicros(time) {
            recordedAt = micros
        }
        return ClientFix(
            latitude: latitude, longitude: longitude, accuracyMeters: accuracy,
            altitudeMeters: altitudeMeters(report),
            speedMetersPerSecond: number(report["speed"]).flatMap { $0 >= 0 ? $0 : nil },
            headingDegrees: number(report["track"]).flatMap {
                (0...360).contains($0) ? $0.truncatingRemainder(dividingBy: 360) : nil
            },
            source: "gps", recordedAtMicros: recordedAt)
    }

    static func accuracyMeters(_ report: JSONObject) -> Double? {
        if let eph = number(report["eph"]) { return eph * radius68PerRadius95 }
        if let epx = number(report["epx"]), let epy = number(report["epy"]) {
            let sigma = ((epx * epx + epy * epy) / 2).squareRoot() / axis95PerSigma
            return sigma * radius68PerAxisSigma
        }
        return nil
    }

    static func altitudeMeters(_ report: JSONObject) -> Double? {
        if let msl = number(report["altMSL"]) ?? number(report["alt"]) { return msl }
        if let hae = number(report["altHAE"]), let separation = number(report["geoidSep"]) {
            return hae - separation
        }
        return nil
    }

    private static func number(_ value: JSONValue?) -> Double? {
        switch value {
        case .integer(let integer)?: return Double(integer)
        case .double(let double)?: return double
        default: return nil
        }
    }
}

/// gpsd's output cut into lines (each report is one line, ended by CR LF), from reads of any size.
struct GPSDLineReader {
    /// gpsd's longest report (a SKY with every satellite) is a few kilobytes; a line longer than
    /// this is not gpsd talking, and is dropped up to its end rather than kept growing.
    static let lineBytesMax = 64 << 10

    private var buffer: [UInt8] = []
    private var start = 0
    private var discarding = false

    mutating func append(_ bytes: ArraySlice<UInt8>) {
        buffer.append(contentsOf: bytes)
    }

    /// The next complete line without its line end; nil until one is complete.
    mutating func nextLine() -> [UInt8]? {
        while true {
            guard let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) else {
                if buffer.count - start > Self.lineBytesMax {
                    discarding = true
                    buffer.removeAll(keepingCapacity: true)
                    start = 0
                } else if start > 0 {
                    buffer.removeFirst(start)
                    start = 0
                }
                return nil
            }
            var end = newline
            if end > start && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            let line = Array(buffer[start..<end])
            start = newline + 1
            if discarding {
                discarding = false
                continue
            }
            if line.count > Self.lineBytesMax { continue }
            return line
        }
    }
}
