import Foundation
import Postgres
@_exported import TestSupport
import Testing

/// One embedded cluster for the whole suite (initdb takes seconds), in a fresh temporary directory,
/// stopped and removed when the suite ends.
struct EmbeddedClusterTrait: SuiteTrait, TestScoping {
    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let dataDirectory = NSTemporaryDirectory() + "findmy-pgtests-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let cluster = try EmbeddedPostgres(dataDirectory: dataDirectory)
        try cluster.start()
        do {
            try await Cluster.$current.withValue(cluster) { try await function() }
        } catch {
            try? cluster.destroy()
            try? FileManager.default.removeItem(atPath: dataDirectory)
            throw error
        }
        // Also removes the OS user made for the cluster when the tests run as root.
        try cluster.destroy()
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}

enum Cluster {
    @TaskLocal static var current: EmbeddedPostgres?

    static var shared: EmbeddedPostgres {
        guard let current else { preconditionFailure("test runs outside the EmbeddedClusterTrait suite") }
        return current
    }

    static func connect() throws -> PostgresConnection { try PostgresConnection(shared.conninfo) }
}

/// Text that breaks naive escaping in SQL literals, COPY and array literals.
let awkwardTexts = [
    "", "plain", "it's", "\"quoted\"", "back\\slash", "\\N", "\\\\N", "tab\there", "new\nline", "cr\rlf\r\n",
    "NULL", "{braces,comma}", "😀 ünïcødé 中文", " leading and trailing ", "\\x00ff", "'; DROP TABLE t; --",
]

func uniqueTable(_ prefix: String) -> String { "\(prefix)_\(UInt32.random(in: 0...UInt32.max))" }

/// Fails the test with the error's description, which is what an operator would read.
func expectPostgresError(
    sqlState: String? = nil, kind: PostgresError.Kind? = nil, _ body: () throws -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
) -> PostgresError? {
    do {
        try body()
        Issue.record("expected a PostgresError", sourceLocation: sourceLocation)
    } catch let error as PostgresError {
        if let sqlState { #expect(error.sqlState == sqlState, "\(error)", sourceLocation: sourceLocation) }
        if let kind { #expect(error.kind == kind, "\(error)", sourceLocation: sourceLocation) }
        return error
    } catch {
        Issue.record("expected a PostgresError, got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}
