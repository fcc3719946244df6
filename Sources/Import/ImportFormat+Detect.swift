import JSON

extension ImportFormat {
    /// How many of a file's first bytes `detect` wants (it decides on fewer, at the end of a file).
    public static let detectionPrefixBytes = 64 * 1024

    /// The format of a file from its first bytes; the name only breaks a tie the content leaves.
    ///
    /// The rule, in order (docs/import-export.md):
    /// 1. `PK\3\4` (a zip): `kmz` when the name ends in `.kmz` or the first entry is a `.kml`,
    ///    otherwise `zip`.
    /// 2. After a UTF-8 byte order mark and white space, `<`: `gpx` when `<gpx` comes, `kml` when
    ///    `<kml` comes (the XML prolog and comments before them are allowed).
    /// 3. `{` or `[`: JSON, by its member names: `timelineObjects` is `googleSemantic`;
    ///    `semanticSegments`, `rawSignals` or `userLocationProfile`, or a top-level array whose first
    ///    element has `startTime`, is `googleTimeline`; `features`, or `locations` whose first
    ///    element is a GeoJSON Feature (`type`, `geometry`), is `geojson`; `locations` whose first
    ///    element has `latitudeE7` (or `timestampMs`) is `googleRecords`.
    /// 4. A first line `YYYY-MM-DDTHH:MM:SSZ<TAB>`: `owntracksRecorder`.
    /// 5. A first line naming a latitude and a longitude column, separated by `,` `;` or a tab: `csv`.
    /// 6. Otherwise the name's extension (`.gpx`, `.kml`, `.kmz`, `.zip`, `.geojson`, `.csv`, `.rec`;
    ///    `Records.json`), when the content is of that family (XML, JSON or text); nil when nothing
    ///    decides.
    public static func detect(prefix: [UInt8], fileName: String?) -> ImportFormat? {
        let name = (fileName ?? "").lowercased()
        if prefix.starts(with: [0x50, 0x4B, 0x03, 0x04]) {
            return name.hasSuffix(".kmz") || firstZipEntry(prefix)?.lowercased().hasSuffix(".kml") == true
                ? .kmz : .zip
        }
        var start = prefix.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        while start < prefix.count, [0x20, 0x09, 0x0A, 0x0D].contains(prefix[start]) { start += 1 }
        let body = Array(prefix[start...])
        guard let first = body.first else { return nil }
        switch first {
        case UInt8(ascii: "<"):
            let text = String(decoding: body, as: UTF8.self).lowercased()
            if text.contains("<gpx") { return .gpx }
            if text.contains("<kml") { return .kml }
            return byName(name, among: [.gpx, .kml])
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            return jsonFormat(body) ?? byName(name, among: [.geojson, .googleRecords])
        default:
            let firstLine = body.prefix { $0 != 0x0A }
            if isRecorderLine(firstLine) { return .owntracksRecorder }
            if isCSVHeader(firstLine) { return .csv }
            return byName(name, among: [.csv, .owntracksRecorder])
        }
    }

    private static func byName(_ name: String, among formats: [ImportFormat]) -> ImportFormat? {
        let byExtension: [(String, ImportFormat)] = [
            (".gpx", .gpx), (".kml", .kml), (".kmz", .kmz), (".zip", .zip), (".geojson", .geojson),
            (".csv", .csv), (".rec", .owntracksRecorder), ("records.json", .googleRecords),
        ]
        for (suffix, format) in byExtension where name.hasSuffix(suffix) && formats.contains(format) {
            return format
        }
        return nil
    }

    /// The name of a zip's first entry, from its local file header.
    private static func firstZipEntry(_ prefix: [UInt8]) -> String? {
        guard prefix.count >= 30 else { return nil }
        let nameLength = Int(prefix[26]) | Int(prefix[27]) << 8
        guard prefix.count >= 30 + nameLength else { return nil }
        return String(decoding: prefix[30..<30 + nameLength], as: UTF8.self)
    }

    /// Reads the member names of the first few thousand tokens (the prefix may end mid-document).
    private static func jsonFormat(_ body: [UInt8]) -> ImportFormat? {
        var position = 0
        let reader = JSONStreamReader { (buffer) throws(JSONStreamError) -> Int in
            let count = min(buffer.count, body.count - position)
            body.withUnsafeBytes {
                buffer.baseAddress!.copyMemory(from: $0.baseAddress! + position, byteCount: count)
            }
            position += count
            return count
        }
        // Members of the top object are at depth 1; those of the first element of an array at
        // depth 2 (the top is the array) or 3 (the array is a member of the top object).
        var topIsArray: Bool?
        var topKeys: Set<String> = []
        var elementKeys: Set<String> = []
        var elementsSeen = 0
        // Enough tokens to get past a first element's long activity list to its coordinates.
        for _ in 0..<4000 {
            guard let token = try? reader.next(), token != .end else { break }
            if topIsArray == nil { topIsArray = token == .arrayStart }
            let elementDepth = topIsArray == true ? 2 : 3
            if token == .objectStart && reader.depth == elementDepth { elementsSeen += 1 }
            guard token == .key else { continue }
            if reader.depth == 1 { topKeys.insert(reader.string) }
            if reader.depth == elementDepth && elementsSeen == 1 { elementKeys.insert(reader.string) }
        }
        if topIsArray == true {
            return elementKeys.contains("startTime") || elementKeys.contains("endTime")
                ? .googleTimeline : nil
        }
        if topKeys.contains("timelineObjects") { return .googleSemantic }
        if !topKeys.isDisjoint(with: ["semanticSegments", "rawSignals", "userLocationProfile"]) {
            return .googleTimeline
        }
        if topKeys.contains("features") { return .geojson }
        if topKeys.contains("locations") {
            if elementKeys.contains("geometry") || elementKeys.contains("type") { return .geojson }
            if elementKeys.contains("latitudeE7") || elementKeys.contains("timestampMs") {
                return .googleRecords
            }
        }
        return nil
    }

    private static func isRecorderLine(_ line: ArraySlice<UInt8>) -> Bool {
        let pattern = Array("dddd-dd-ddTdd:dd:ddZ\t".utf8)
        guard line.count > pattern.count else { return false }
        for (expected, byte) in Swift.zip(pattern, line) {
            if expected == UInt8(ascii: "d") {
                guard byte &- UInt8(ascii: "0") < 10 else { return false }
            } else if expected != byte {
                return false
            }
        }
        return true
    }

    private static func isCSVHeader(_ line: ArraySlice<UInt8>) -> Bool {
        let separator = CSVReader<MemoryByteSource>.separator(of: line)
        let names = line.split(separator: separator).map {
            String(decoding: $0, as: UTF8.self).lowercased().filter { $0 != "\"" && $0 != " " && $0 != "\r" }
        }
        return names.contains { CSVHeader.latitudeNames.contains($0) }
            && names.contains { CSVHeader.longitudeNames.contains($0) }
    }
}
