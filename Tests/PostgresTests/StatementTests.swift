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

extension PostgresTests {
    /// `send` returns before the result; `receive` reads it. A cursor fetched in pieces, each piece
    /// sent before the previous one is read, gives the rows of the plain statement, in order, and
    /// an error arrives at `receive`, leaving the connection usable.
    @Test func sentStatementsAreReceivedInOrderAndCursorPiecesMatchTheWhole() throws {
        let connection = try Cluster.connect()
        let whole = try connection.execute(
            "SELECT g, g * 0.5, repeat('x', g % 7) FROM generate_series(1, $1::int) g ORDER BY g",
            [.int64(2_500)], format: .binary)
        var pieces: [Int64] = []
        try connection.transaction { connection in
            try connection.execute(
                "DECLARE pieces NO SCROLL CURSOR FOR SELECT g, g * 0.5, repeat('x', g % 7) FROM generate_series(1, $1::int) g ORDER BY g",
                [.int64(2_500)])
            try connection.send("FETCH 1000 FROM pieces", format: .binary)
            while true {
                let piece = try connection.receive()
                if piece.rowCount == 1000 { try connection.send("FETCH 1000 FROM pieces", format: .binary) }
                for row in 0..<piece.rowCount { pieces.append(try piece.binaryInt64(row, 0) ?? -1) }
                if piece.rowCount < 1000 { break }
            }
        }
        #expect(pieces.count == whole.rowCount)
        #expect(pieces == (0..<whole.rowCount).map { (try? whole.binaryInt64($0, 0)) ?? -2 })

        try connection.send("SELEKT 1")
        _ = expectPostgresError(sqlState: PostgresError.syntaxError) { _ = try connection.receive() }
        #expect(try connection.execute("SELECT 41 + 1").int64(0, 0) == 42)
    }

    /// A statement left unread when the caller gives up (an error of its own) does not stay in the
    /// way: the transaction's rollback drains it.
    @Test func anUnreadSentStatementIsDrainedByTheRollback() throws {
        let connection = try Cluster.connect()
        do {
            try connection.transaction { connection in
                try connection.send("SELECT pg_sleep(0.05), 1", format: .binary)
                throw Abort()
            }
        } catch is Abort {}
        #expect(try connection.execute("SELECT 2 + 2").int64(0, 0) == 4)
    }
}
