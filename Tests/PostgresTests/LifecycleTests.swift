import Foundation
import Postgres
import Testing

extension PostgresTests {
    @Test func theEmbeddedClusterHasNoTCPPortAndListensOnlyOnItsSocket() throws {
        let connection = try Cluster.connect()
        #expect(try connection.execute("SHOW listen_addresses").string(0, 0) == "")
        #expect(
            try connection.execute("SHOW unix_socket_directories").string(0, 0)
                == Cluster.shared.socketDirectory)
        #expect(try connection.execute("SELECT current_database(), current_user").string(0, 0) == "findmy")
        let socketMode =
            try FileManager.default.attributesOfItem(
                atPath: Cluster.shared.socketDirectory + "/.s.PGSQL.5432")[.posixPermissions] as? Int
        #expect(socketMode == 0o700)
    }

    @Test func theClientReconnectsAfterTheServerRestarts() throws {
        let client = PostgresClient(
            conninfo: Cluster.shared.conninfo,
            policy: .init(reconnectDelayMillisMin: 20, reconnectDelayMillisMax: 200, reconnectAttemptsMax: 10)
        )
        #expect(try client.execute("SELECT 1").int64(0, 0) == 1)
        try Cluster.shared.stop()
        try Cluster.shared.start()
        #expect(try client.execute("SELECT 2").int64(0, 0) == 2)
        #expect(client.connectCount == 2)
    }

    @Test func theClientGivesUpAfterItsAttemptsAndRecoversLater() throws {
        let client = PostgresClient(
            conninfo: Cluster.shared.conninfo,
            policy: .init(reconnectDelayMillisMin: 10, reconnectDelayMillisMax: 40, reconnectAttemptsMax: 3))
        try Cluster.shared.stop()
        let error = expectPostgresError(kind: .connect) { try client.execute("SELECT 1") }
        #expect(error?.connectionBroken == true)
        try Cluster.shared.start()
        #expect(try client.execute("SELECT 3").int64(0, 0) == 3)
    }

    @Test func theClusterSurvivesItsPostmasterBeingKilled() throws {
        let table = uniqueTable("crash")
        try Cluster.connect().executeScript(
            "CREATE TABLE \(table) (id bigint); INSERT INTO \(table) VALUES (42)")
        let pid = try #require(Cluster.shared.postmasterPID())
        #expect(kill(pid, SIGKILL) == 0)
        #expect(waitUntil { Cluster.shared.postmasterPID() == nil })
        try Cluster.shared.start()
        #expect(Cluster.shared.postmasterPID() != pid)
        #expect(try Cluster.connect().execute("SELECT id FROM \(table)").int64(0, 0) == 42)
    }

    @Test func startingAgainReusesTheRunningServer() throws {
        let pid = try #require(Cluster.shared.postmasterPID())
        try Cluster.shared.start()
        #expect(Cluster.shared.postmasterPID() == pid)
    }
}
