import Events
import Foundation
import Testing

/// The log id as the writer, readers, `verify` and backups report it.
@Suite struct LogIDAPITests {
    let ids = LogIDTests()

    @Test func writerReaderVerifyAndBackupAgreeOnTheID() throws {
        let directory = TemporaryDirectory()
        try ids.writeLog(directory.log, batches: 30)
        let onDisk = try ids.idOnDisk(try segmentFiles(directory.log)[0])
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(writer.logID.bytes == onDisk)
        #expect(writer.recovery.logIDAssignedAtOffset == nil)
        #expect(try LogReader(directory: directory.log, writer: writer).logID() == writer.logID)
        #expect(try LogReader(directory: directory.log).logID() == writer.logID)
        #expect(try LogInspector(directory: directory.log).verify().logID == writer.logID)
        let copy = TemporaryDirectory()
        #expect(try LogBackup().copy(from: directory.log, to: copy.path).logID == writer.logID)
        #expect(try LogReader(directory: copy.path).logID() == writer.logID, "a restored log keeps its id")
        writer.close()
    }

    @Test func anOldLogHasNoIDUntilAWriterGivesItOne() throws {
        let directory = TemporaryDirectory()
        try ids.writeLog(directory.log, batches: 30)
        try ids.makeOld(directory.log)
        #expect(try LogReader(directory: directory.log).logID() == nil)
        // `verify` changes nothing.
        #expect(try LogInspector(directory: directory.log).verify().logID == nil)
        #expect(try LogReader(directory: directory.log).logID() == nil)
        let end = try readAll(directory.log).count
        let writer = try LogWriter(directory: directory.log, options: quietOptions())
        #expect(writer.logID != .zero)
        #expect(writer.recovery.logIDAssignedAtOffset == UInt64(end))
        #expect(try LogReader(directory: directory.log).logID() == writer.logID)
        writer.close()
    }
}
