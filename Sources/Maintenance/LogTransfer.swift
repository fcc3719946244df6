import CLI
import Crypto
import Events
import NATSLog
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy log export` and `findmy log import`: moving a single-machine log into a JetStream
/// cluster (docs/scale.md, "Migrating a single-machine log"; the file format is Events/LogExport.swift).
///
/// How an import stays exactly once across reruns and crashes: every message it stores carries
/// the NATS header `Findmy-Import: <source log id> <source offset>` and the Msg-Id
/// `i<source log id>-<source offset>`. Before publishing anything, an import reads the whole
/// stream and takes every message with such a header as already imported (whatever the duplicate
/// window); a publish that was in flight when an earlier run died is found by its Msg-Id within the
/// window, or by the header after it. A stream holding any other message is refused: its registry
/// (user and device ids) would clash with the imported one.
package enum LogTransfer {
    static let importHeader = "Findmy-Import"
    /// Where a command answer points when the batch it named is not in the export (a compaction
    /// dropped it): an offset no record has, which the projection stores as a bigint.
    static let goneBatchOffset = UInt64(Int64.max)
    /// Records queued per partition ahead of its publisher.
    static let queuedRecordsMax = 1024
    /// Publishes in flight per partition during an import (`--publishers-per-partition`).
    package static let publishersPerPartitionDefault = 8
    static let progressIntervalMicros: Int64 = 2_000_000

    // MARK: - export

    package static func export(dataDirectory: String, out: String) throws -> Int32 {
        let directory = dataDirectory + "/log"
        try LogInspection.requireLog(directory)
        // Holding the writer lock keeps a server from starting meanwhile, so the file is the whole
        // log; when a server holds it, the export is what was durable when it started.
        let lock = try LogDirectoryLock.take(directory: directory)
        let reader = LogReader(directory: directory)
        let end = reader.durableEnd()
        let header = LogExportHeader(
            flags: lock == nil ? LogExportHeader.flagServerRunning : 0, logID: try reader.logID() ?? .zero,
            firstOffset: try reader.firstOffset(), endOffset: end, exportedAtMicros: wallClockMicros())
        let output = try ExportOutput(out)
        var (writer, bytes) = LogExportWriter.start(header)
        try output.write(bytes)
        var next = header.firstOffset
        var first: UInt64?
        var segmentsGone = 0
        while next < end {
            do {
                next = try reader.read(from: next, upTo: end) { record in
                    first = first ?? record.offset
                    try output.write(writer.entry(record))
                    return true
                }
            } catch let error as IOError where error.errno == ENOENT && lock == nil && segmentsGone < 8 {
                // A compaction of the running server deleted a whole first segment between the
                // listing and the read: nothing in it was live. Read on from where we are.
                segmentsGone += 1
            }
        }
        try output.write(writer.trailer())
        try output.finish()
        let summary =
            "exported \(writer.records) records (\(writer.fixes) fixes) of log \(header.logID), offsets "
            + "\(first.map { "\($0)" } ?? "-")...\(end) (end), to \(out == "-" ? "standard output" : out) "
            + "(\(output.bytesWritten) bytes)"
        printStatus(summary, toStandardError: out == "-")
        if lock == nil {
            printStatus(
                "a server held the log: the export ends at offset \(end), records appended after that are not "
                    + "in it; stop the server and export again for the migration itself",
                toStandardError: true)
        }
        return 0
    }

    /// A file written under a temporary name and renamed into place once complete and synced (a
    /// cut export never has the final name), or standard output.
    final class ExportOutput {
        let path: String?
        let temporary: String?
        let fd: Int32
        private(set) var bytesWritten = 0
        private var pending: [UInt8] = []
        static let flushBytes = 1 << 20

        init(_ out: String) throws {
            if out == "-" {
                (path, temporary, fd) = (nil, nil, 1)
                return
            }
            let temporary = out + ".partial"
            let fd = Glibc.open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            guard fd >= 0 else {
                throw UsageError("cannot write \(temporary): \(String(cString: strerror(errno)))")
            }
            (path, self.temporary, self.fd) = (out, temporary, fd)
        }

        func write(_ bytes: [UInt8]) throws {
            pending += bytes
            if pending.count >= Self.flushBytes { try flush() }
        }

        private func flush() throws {
            if let temporary {
                try PosixFileIO().writeAll(fd, pending, at: bytesWritten, path: temporary)
            } else {
                // A pipe has no positions: plain writes, continuing after short ones.
                var done = 0
                while done < pending.count {
                    let written = pending[done...].withUnsafeBytes {
                        Glibc.write(fd, $0.baseAddress, $0.count)
                    }
                    if written < 0 && errno == EINTR { continue }
                    guard written > 0 else {
                        throw UsageError(
                            "cannot write to standard output: \(String(cString: strerror(errno)))")
                    }
                    done += written
                }
            }
            bytesWritten += pending.count
            pending.removeAll(keepingCapacity: true)
        }

        /// Gives up a file export cut short by an error: the partial file goes, so that nothing
        /// is left that looks like an export.
        func discard() {
            guard let temporary else { return }
            Glibc.close(fd)
            unlink(temporary)
        }

        func finish() throws {
            try flush()
            guard let path, let temporary else { return }
            try PosixFileIO().fsync(fd, path: temporary)
            Glibc.close(fd)
            guard rename(temporary, path) == 0 else {
                throw UsageError("cannot rename \(temporary) to \(path): \(String(cString: strerror(errno)))")
            }
        }
    }

    static func printStatus(_ line: String, toStandardError: Bool) {
        if toStandardError {
            writeStandardError(line)
        } else {
            printLine(line)
        }
    }
}
