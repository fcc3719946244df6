import Core
import Identity

/// The structured log's lines about the registry's start from its snapshots and about the
/// snapshots written since, the same for a local log and a shared one.
package enum RegistryStartLog {
    /// One line per snapshot a start passed over, and one if the directory could not be read.
    package static func snapshotsPassedOver(_ start: RegistryStartReport) {
        for skipped in start.skipped {
            StructuredLog.info(
                "registry_snapshot_skipped",
                [
                    "file": .string(skipped.fileName), "reason": .string(skipped.reason),
                    "deleted": .bool(skipped.deleted),
                ])
        }
        if let error = start.snapshotError {
            StructuredLog.error("registry_snapshot_unreadable", ["error": .string(error)])
        }
    }

    /// A snapshot written is quiet unless slow; a refold or a failure is worth a line.
    package static func snapshotOutcome(_ outcome: RegistrySnapshotter.Outcome) {
        switch outcome {
        case .written(_, let offset, let bytes, let millis):
            if millis >= 1000 {
                StructuredLog.info(
                    "registry_snapshot_written",
                    ["offset": .int(Int64(offset)), "bytes": .int(Int64(bytes)), "millis": .int(millis)])
            }
        case .refolding(let reason):
            StructuredLog.info("registry_snapshot_refolding", ["reason": .string(reason)])
        case .failed(let error):
            StructuredLog.error("registry_snapshot_failed", ["error": .string(error)])
        }
    }
}
