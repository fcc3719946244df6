// Placeholder so the skeleton's Package.swift builds; the event log lands here on its own branch.
/// The version of the event log format this build writes. Nothing is written yet.
public enum EventLogFormat {
    public static let version = 0
}
