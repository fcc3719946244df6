import Foundation
import JSON
import Testing

/// `findmy-agent` against an `https://` server: TLS in front of a real `findmy serve`
/// (ops/bench/tls_proxy.py, python3's ssl, a certificate for localhost made with openssl and
/// trusted through SSL_CERT_FILE). The agent links neither libssl nor libcrypto (they are loaded on
/// its first TLS connection), so this is the test that the loading works in the process that
/// needs it: enrolment and a fix stored, both over TLS.
@Suite(.serialized) struct AgentTLSTests {
    static let proxyScript =
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("ops/bench/tls_proxy.py").path

    @Test func theAgentLinksNoOpenSSLAndLoadsItForAnHTTPSServer() throws {
        let elf = try FindmyProcess.run(["-d", agentExecutable()], executable: "/usr/bin/readelf")
        #expect(elf.status == 0, "readelf: \(elf.error)")
        let needed = elf.output.split(separator: "\n").filter { $0.contains("(NEEDED)") }
        #expect(!needed.isEmpty, "readelf found no NEEDED entries: \(elf.output)")
        #expect(
            !needed.contains {
                $0.contains("libssl") || $0.contains("libcrypto") || $0.contains("libsodium")
            },
            "\(needed)")

        let data = ScratchDirectory("findmy-agent-tls")
        let server = try ServerProcess(data: data.path)
        defer { server.stop() }
        let token = try addUser("olga", data: data.path)
        let certificate = data.path + "/cert.pem"
        let key = data.path + "/key.pem"
        let made = try FindmyProcess.run(
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate, "-days",
                "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            ], executable: "/usr/bin/openssl")
        try #require(made.status == 0, "openssl: \(made.error)")
        let portFile = data.path + "/tls.port"
        let serverPort = try #require(server.address.split(separator: ":").last.map(String.init))
        let proxy = try FindmyProcess(
            [Self.proxyScript, certificate, key, portFile, serverPort], executable: "/usr/bin/python3")
        defer {
            proxy.kill()
            proxy.wait()
        }
        var port = ""
        try waitUntil("the TLS proxy's port") {
            port = (try? String(contentsOfFile: portFile, encoding: .utf8)) ?? ""
            return !port.isEmpty
        }
        let trust = ["SSL_CERT_FILE": certificate]
        let state = data.path + "/agent"
        let enrolled = try FindmyProcess.run(
            [
                "enrol", "--server", "https://localhost:\(port)", "--user-token", token, "--name", "pi",
                "--state-dir", state,
            ], environment: trust, executable: agentExecutable())
        try #require(enrolled.status == 0, "enrol over TLS: \(enrolled.output) \(enrolled.error)")

        let agent = try FindmyProcess(
            [
                "run", "--state-dir", state, "--fixed", "52.5,13.4,30", "--interval-seconds", "1",
                "--batch-age-seconds", "1",
            ], environment: trust, executable: agentExecutable())
        defer {
            agent.kill()
            agent.wait()
        }
        try waitUntil("a batch stored over TLS") { agent.standardError.contains(" stored: ") }
        let fixes = try dumpLog(data.path).records.filter { $0["type"] == .string("fix_batch") }
        #expect(!fixes.isEmpty)
    }
}
