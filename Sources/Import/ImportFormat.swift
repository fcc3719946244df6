/// The formats findmy imports (docs/import-export.md). `rawValue` is how the format is named on the
/// command line (`--format`), in the API and in the arrivals audit (`import:<rawValue>`).
public enum ImportFormat: String, CaseIterable, Sendable {
    /// Google Takeout's `Records.json`: `locations[]` with `latitudeE7`/`longitudeE7`.
    case googleRecords = "google-records"
    /// Google Takeout's Semantic Location History: monthly files of `timelineObjects[]`.
    case googleSemantic = "google-semantic"
    /// The on-device Timeline export of 2024 and later: `semanticSegments[]`, `rawSignals[]`.
    case googleTimeline = "google-timeline"
    case gpx
    case kml
    case kmz
    case geojson
    case csv
    /// OwnTracks Recorder's `.rec` files (one, or a store directory of `rec/USER/DEVICE/*.rec`).
    case owntracksRecorder = "owntracks-recorder"
    /// A `.zip` such as a Google Takeout archive: every entry of a known format is imported.
    case zip
}
