import Foundation
import HTTPClient
import JSON
import MosquittoSupport
import Testing

/// `mqtts://`: findmy subscribes over TLS to a real mosquitto's TLS listener, whose certificate a
/// test CA made here signed for the name `localhost` only. The right CA file connects and ingests;
/// another CA, or a URL host the certificate does not list, is refused with a reason in /healthz.
@Suite struct OwnTracksMQTTTLSTests {
    /// A CA, and a server certificate for DNS:localhost signed by it; a second, unrelated CA.
    struct Certificates {
        var ca: String
        var otherCA: String
        var serverCertificate: String
        var serverKey: String
    }

    static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestFailure("openssl \(arguments.joined(separator: " ")) failed: \(text)")
        }
    }

    static func makeCertificates(in directory: String) throws -> Certificates {
        for name in ["ca", "other-ca"] {
            try openssl([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).pem", "-days", "2",
                "-subj", "/CN=findmy test \(name)",
            ])
        }
        try openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "\(directory)/server.key", "-out", "\(directory)/server.csr", "-subj", "/CN=localhost",
        ])
        try "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n".write(
            toFile: "\(directory)/server.ext", atomically: true, encoding: .utf8)
        try openssl([
            "x509", "-req", "-in", "\(directory)/server.csr", "-CA", "\(directory)/ca.pem", "-CAkey",
            "\(directory)/ca.key", "-CAcreateserial", "-out", "\(directory)/server.pem", "-days", "2",
            "-extfile", "\(directory)/server.ext",
        ])
        return Certificates(
            ca: "\(directory)/ca.pem", otherCA: "\(directory)/other-ca.pem",
            serverCertificate: "\(directory)/server.pem", serverKey: "\(directory)/server.key")
    }

    @Test func findmySubscribesOverTLSWithTheRightCAAndRefusesAWrongCAOrHost() throws {
        let data = ScratchDirectory("findmy-mqtt-tls")
        let certificates = try Self.makeCertificates(in: data.path)
        let broker = try Mosquitto(
            tls: .init(certificateFile: certificates.serverCertificate, keyFile: certificates.serverKey))
        let tlsPort = try #require(broker.tlsPort)
        _ = try addUser("alice", data: data.path)

        // Another CA: the certificate chain does not verify.
        let wrongCA = try OwnTracksMQTTTests.server(
            data.path, broker, subscribed: false, url: "mqtts://localhost:\(tlsPort)",
            extra: ["--mqtt-ca-file", certificates.otherCA])
        defer { stopIfRunning(wrongCA) }
        #expect(
            waitUntil(timeoutSeconds: 120) {
                (try? OwnTracksMQTTTests.mqttHealth(wrongCA)["last_error"]?.stringValue)?.contains(
                    "certificate is not trusted for 'localhost': unable to get local issuer certificate")
                    == true
            }, "\((try? OwnTracksMQTTTests.mqttHealth(wrongCA)) ?? .null)")
        #expect(wrongCA.stop() == 0)

        // The right CA, but an address the certificate does not list (it names localhost only).
        let wrongHost = try OwnTracksMQTTTests.server(
            data.path, broker, subscribed: false, url: "mqtts://127.0.0.1:\(tlsPort)",
            extra: ["--mqtt-ca-file", certificates.ca])
        defer { stopIfRunning(wrongHost) }
        #expect(
            waitUntil(timeoutSeconds: 120) {
                (try? OwnTracksMQTTTests.mqttHealth(wrongHost)["last_error"]?.stringValue)?.contains(
                    "certificate is not trusted for '127.0.0.1': IP address mismatch") == true
            }, "\((try? OwnTracksMQTTTests.mqttHealth(wrongHost)) ?? .null)")
        #expect(wrongHost.stop() == 0)

        let server = try OwnTracksMQTTTests.server(
            data.path, broker, url: "mqtts://localhost:\(tlsPort)",
            extra: ["--mqtt-ca-file", certificates.ca])
        defer { stopIfRunning(server) }
        #expect(try OwnTracksMQTTTests.mqttHealth(server)["tls"] == .bool(true))
        try broker.publish(topic: "owntracks/alice/phone", OwnTracksMQTTTests.location(latitude: 45.5))
        #expect(
            waitUntil(timeoutSeconds: 120) { OwnTracksMQTTTests.count(server, "acknowledgements_sent") == 1 })
        #expect(server.stop() == 0)
        #expect(try OwnTracksMQTTTests.batches(data.path, latitude: 45.5).count == 1)
    }
}
