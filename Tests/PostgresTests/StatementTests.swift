import Foundation
import Postgres
import Testing

private struct Abort: Error {}

extension PostgresTests {
    @Test func aUniqueViolationCarriesSQLState23505AndDetail() throws {
        let connection = try Cluster.connect()
        let table = uniqueTable("unique")
        try connection.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY)")
        try connection.execute("INSERT INTO \(table) VALUES ($1)", [.int64(7)])
        let error = expectPostgresError(sqlState: PostgresError.uniqueViolation) {
            try connection.execute("INSERT INTO \(table) VALUES ($1)", [.int64(7)])
        }
        #expect(error?.detail?.contains("(id)=(7)") == true)
        #expect(error?.connectionBroken == false)
        #expect(try connection.execute("SELECT count(*) FROM \(table)").int64(0, 0) == 1)
    }

    @Test func aSyntaxErrorCarriesSQLState42601() throws {
        let connection = try Cluster.connect()
        let error = expectPostgresError(sqlState: PostgresError.syntaxError) {
            try connection.execute("SELEKT 1")
        }
        #expect(error.map { "\($0)" }?.contains("statement failed on PostgreSQL at socket directory") == true)
        _ = expectPostgresError(sqlState: PostgresError.syntaxError) {
            try connection.executeScript("SELECT 1; SELEKT 2")
        }
    }

    @Test func aConnectionFailureNamesTheServer() throws {
        let error = expectPostgresError(kind: .connect) {
            _ = try PostgresConnection("host=/nonexistent/findmy dbname=findmy user=findmy")
        }
        #expect(
            error.map { "\($0)" }?.hasPrefix(
                "cannot connect to PostgreSQL at socket directory /nonexistent/findmy") == true)
        #expect(error?.connectionBroken == true)
        let url = expectPostgresError(kind: .connect) {
            _ = try PostgresConnection("postgresql://findmy:secret@127.0.0.1:1/findmy?connect_timeout=2")
        }
        #expect(url.map { "\($0)" }?.contains("secret") == false)
    }

    @Test func aTransactionRollsBackWhenItsBodyThrows() throws {
        let connection = try Cluster.connect()
        let table = uniqueTable("tx")
        try connection.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY)")
        #expect(throws: Abort.self) {
            try connection.transaction { connection in
                try connection.execute("INSERT INTO \(table) VALUES ($1)", [.int64(1)])
                throw Abort()
            }
        }
        #expect(try connection.execute("SELECT count(*) FROM \(table)").int64(0, 0) == 0)
        try connection.transaction { try $0.execute("INSERT INTO \(table) VALUES ($1)", [.int64(2)]) }
        #expect(try connection.execute("SELECT count(*) FROM \(table)").int64(0, 0) == 1)
        // A failure the body swallowed still aborts the transaction; COMMIT must not pretend otherwise.
        _ = expectPostgresError(kind: .statement) {
            try connection.transaction { connection in
                try connection.execute("INSERT INTO \(table) VALUES ($1)", [.int64(3)])
                _ = try? connection.execute("INSERT INTO \(table) VALUES ($1)", [.int64(2)])
            }
        }
        #expect(try connection.execute("SELECT count(*) FROM \(table)").int64(0, 0) == 1)
    }
}
