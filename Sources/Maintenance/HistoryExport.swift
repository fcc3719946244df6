import CLI
import Events
import Export

/// `findmy export` once parsed: a device's history, as the server would show it, read from the
/// log (`LogHistory`) and written in one format (`FixExporter`) to a file or standard output.
package enum HistoryExport {
    package struct Request {
        package var dataDirectory: String
        package var deviceID: UInt64
        package var format: ExportFormat
        package var fromMicros: Int64?
        package var toMicros: Int64?
        package var settings: RetentionSettings
        package var nowMicros: Int64
        /// A file (written as FILE.partial, renamed once complete), or "-" for standard output.
        package var out: String

        package init(
            dataDirectory: String, deviceID: UInt64, format: ExportFormat, fromMicros: Int64?,
            toMicros: Int64?,
            settings: RetentionSettings, nowMicros: Int64, out: String
        ) {
            self.dataDirectory = dataDirectory
            self.deviceID = deviceID
            self.format = format
            self.fromMicros = fromMicros
            self.toMicros = toMicros
            self.settings = settings
            self.nowMicros = nowMicros
            self.out = out
        }
    }

    package static func run(_ request: Request) throws -> Int32 {
        let directory = request.dataDirectory + "/log"
        try LogInspection.requireLog(directory)
        let reader = LogReader(directory: directory)
        // The device is checked before the output is opened: an unknown device leaves no file.
        let facts = try LogHistory.facts(device: request.deviceID, reader: reader, settings: request.settings)
        let output = try LogTransfer.ExportOutput(request.out)
        var exporter = FixExporter(format: request.format) { bytes in try output.write(Array(bytes)) }
        let counts: LogHistory.Counts
        do {
            counts = try LogHistory.fixes(
                of: facts, reader: reader, fromMicros: request.fromMicros, toMicros: request.toMicros,
                nowMicros: request.nowMicros
            ) { fix, receivedAtMicros in
                try exporter.write(fix, receivedAtMicros: receivedAtMicros)
            }
            try exporter.finish()
            try output.finish()
        } catch {
            output.discard()
            throw error
        }
        LogTransfer.printStatus(
            summary(request, facts: facts, counts: counts, bytes: output.bytesWritten),
            toStandardError: request.out == "-")
        return 0
    }

    static func summary(
        _ request: Request, facts: LogHistory.DeviceFacts, counts: LogHistory.Counts, bytes: Int
    )
        -> String
    {
        let destination = request.out == "-" ? "standard output" : request.out
        var line =
            "exported \(counts.written) fixes of device \(facts.deviceID) (\(facts.name)) as "
            + "\(request.format.rawValue), in log order, to \(destination) (\(bytes) bytes)"
        var hidden: [String] = []
        if counts.expired > 0 {
            hidden.append(
                "\(counts.expired) past the retention window "
                    + "(\(facts.policy.windowDays(device: facts.deviceID)) days)")
        }
        if counts.erased > 0 { hidden.append("\(counts.erased) erased") }
        if !hidden.isEmpty {
            line += "; left out, as the server no longer shows them: " + hidden.joined(separator: ", ")
        }
        return line
    }
}
