import Events
import Geofences
import JSON
import Testing

@testable import Clients

/// The notifier's pure parts: the signature (checked against Python's hmac, as a receiver computes
/// it), the retry schedule, the payloads, and the OwnTracks waypoints command.
struct AlertUnitTests {
    @Test func theSignatureIsWhatAReceiverComputesWithTheSecretShown() {
        let signing = WebhookSigning(serverKey: [UInt8](repeating: 1, count: 32))
        // python3: hmac.new(bytes([1]*32), b"findmy geofence webhook v1 3", sha256).hexdigest()
        #expect(
            signing.secret(geofenceID: 3)
                == "c9045331687bae7c54ef4d9f3ee3ade23692f05548809407db2d69a6a6c048ff")
        // python3: "sha256=" + hmac.new(secret.encode(), b'{"a":1}', sha256).hexdigest()
        #expect(
            signing.signature(geofenceID: 3, body: Array(#"{"a":1}"#.utf8))
                == "sha256=112beb52a35b2e801b5006793b76defd2e1d5c2e3656b201deba210be77abd0e")
        #expect(signing.secret(geofenceID: 4) != signing.secret(geofenceID: 3))
        #expect(
            WebhookSigning(serverKey: [UInt8](repeating: 2, count: 32)).secret(geofenceID: 3)
                != signing.secret(geofenceID: 3))
    }

    @Test func aReceiversBodyIsNeverShownFromAnOlderRow() {
        #expect(GeofenceAlertRoutes.shownError("answered 500: {\"secret\": \"internal\"}") == "answered 500")
        #expect(GeofenceAlertRoutes.shownError("answered 404") == "answered 404")
        #expect(
            GeofenceAlertRoutes.shownError("refused: 127.0.0.1 is not a public address")
                == "refused: 127.0.0.1 is not a public address")
    }

    @Test func retriesBackOffExponentiallyUpToTheMaximum() {
        var options = GeofenceNotifier.Options()
        options.retryBaseMicros = 10_000_000
        options.retryDelayMicrosMax = 3_600_000_000
        let delays = (1...12).map {
            GeofenceNotifier.retryDelayMicros(attempt: $0, options: options) / 1_000_000
        }
        #expect(delays == [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600])
        #expect(GeofenceNotifier.retryDelayMicros(attempt: 200, options: options) == 3_600_000_000)
        options.retryBaseMicros = 0
        #expect(GeofenceNotifier.retryDelayMicros(attempt: 3, options: options) == 0)
    }

    let row = TransitionRow(
        id: 5, geofenceID: 3, deviceID: 7, event: "leave", recordedAtMicros: 1_764_770_400_000_000,
        receivedAtMicros: 1_764_770_402_120_000, fixAccuracyMeters: 12, logOffset: 4411, fixIndex: 0)

    @Test func thePayloadsNameTheTransitionAndKeepTheKeyAcrossRows() throws {
        let body = try JSONParser.parse(
            AlertMessages.webhookBody(row, fenceName: "Home", deviceName: "phone"))
        #expect(try body["event"]?.stringValue == "leave")
        #expect(try body["geofence_name"]?.stringValue == "Home")
        #expect(try body["recorded_at"]?.stringValue == "2025-12-03T14:00:00.000000Z")
        #expect(try body["idempotency_key"]?.stringValue == "gf3-d7-leave-1764770400000000-o4411.0")
        // A rebuilt projection numbers its rows again: the key names the fix, not the row.
        var rebuilt = row
        rebuilt.id = 1
        #expect(rebuilt.idempotencyKey == row.idempotencyKey)
        let ntfy = AlertMessages.ntfy(row, fenceName: "Home", deviceName: "phone")
        #expect(ntfy.title == "phone left Home")
        #expect(ntfy.tags == "runner,findmy,geofence-leave")
        #expect(AlertMessages.headerValue("Zuhause Ümit") == "=?UTF-8?B?WnVoYXVzZSDDnG1pdA==?=")
        #expect(AlertMessages.headerValue("a\r\nb").hasPrefix("=?UTF-8?B?"))
    }

    @Test func theWaypointsCommandHasOwnTracksShape() throws {
        let fence = GeofenceDefined(
            geofenceID: 3, ownerUserID: 1, name: "Home", latitude: 52.52, longitude: 13.405,
            radiusMeters: 100.4,
            deviceIDs: [7])
        let command = try JSONParser.parse(FenceWaypoints.command([fence]))
        #expect(try command["_type"]?.stringValue == "cmd")
        #expect(try command["action"]?.stringValue == "setWaypoints")
        #expect(try command["waypoints"]?["_type"]?.stringValue == "waypoints")
        let waypoint = try #require(try command["waypoints"]?["waypoints"]?.arrayValue.first)
        #expect(try waypoint["_type"]?.stringValue == "waypoint")
        #expect(try waypoint["desc"]?.stringValue == "Home")
        #expect(try waypoint["lat"]?.doubleValue == 52.52)
        #expect(try waypoint["rad"]?.int64Value == 100)
        #expect(try waypoint["tst"]?.int64Value == 3)
        #expect(try waypoint["rid"]?.stringValue == "findmy-3")
    }
}
