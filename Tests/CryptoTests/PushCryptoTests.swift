import Crypto
import Testing

#if canImport(Glibc)
    import Glibc
#endif

private func b64(_ text: String) -> [UInt8] { Base64URL.decode(text)! }

/// RFC 8291 Appendix A: the application server's ephemeral key and salt are fixed, so the body is
/// the RFC's byte for byte.
@Test func webPushEncryptionReproducesRFC8291AppendixA() throws {
    let senderPoint = b64(
        "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")
    let sender = try #require(
        PrivateKey.p256(scalar: b64("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"), publicPoint: senderPoint))
    let receiverPoint = b64(
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4")
    let auth = b64("BTBZMqHH6r4Tts7J_aSIgg")
    let body = try WebPushEncryption.encrypt(
        Array("When I grow up, I want to be a watermelon".utf8), receiverPoint: receiverPoint,
        authSecret: auth,
        ephemeral: sender, salt: b64("DGv6ra1nlYgDCS1FRnbzlw"))
    #expect(
        Base64URL.encode(body)
            == "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8w"
            + "EqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")

    let receiver = try #require(
        PrivateKey.p256(
            scalar: b64("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"), publicPoint: receiverPoint))
    #expect(
        WebPushEncryption.decrypt(body, receiver: receiver, authSecret: auth)
            == Array("When I grow up, I want to be a watermelon".utf8))
}

@Test func webPushEncryptionPadsAndRefusesBadKeys() throws {
    let receiver = PrivateKey.generateP256()
    let auth = SecureRandom.bytes(count: 16)
    let body = try WebPushEncryption.encrypt(
        Array("{}".utf8), receiverPoint: receiver.publicPoint, authSecret: auth, paddingBytes: 100)
    #expect(body.count == 86 + 2 + 1 + 100 + 16)
    #expect(WebPushEncryption.decrypt(body, receiver: receiver, authSecret: auth) == Array("{}".utf8))
    var altered = body
    altered[100] ^= 1
    #expect(WebPushEncryption.decrypt(altered, receiver: receiver, authSecret: auth) == nil)
    // A point off the curve, and a short auth secret.
    var offCurve = receiver.publicPoint
    offCurve[64] ^= 1
    #expect(throws: WebPushEncryption.Failure.badSubscriptionKeys) {
        try WebPushEncryption.encrypt([1], receiverPoint: offCurve, authSecret: auth)
    }
    #expect(throws: WebPushEncryption.Failure.badSubscriptionKeys) {
        try WebPushEncryption.encrypt([1], receiverPoint: receiver.publicPoint, authSecret: [1, 2])
    }
    #expect(throws: WebPushEncryption.Failure.tooLarge) {
        try WebPushEncryption.encrypt(
            [UInt8](repeating: 0, count: 4000), receiverPoint: receiver.publicPoint, authSecret: auth)
    }
}

/// RFC 7515 Appendix A.3: the RFC's R || S signature verifies under the RFC's key, so our raw
/// form is JWS's; and what we sign verifies too (ECDSA is randomised: no fixed output to compare).
@Test func es256SignaturesAreJWSRawRAndS() throws {
    let point =
        [UInt8(4)] + b64("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU")
        + b64("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0")
    let key = try #require(
        PrivateKey.p256(scalar: b64("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"), publicPoint: point))
    let input = Array(
        "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
            .utf8)
    let rfcSignature = b64(
        "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q")
    #expect(key.verifyES256(input, signature: rfcSignature))
    for _ in 0..<50 {
        let signature = key.signES256(input)
        #expect(signature.count == 64)
        #expect(key.verifyES256(input, signature: signature))
        #expect(!key.verifyES256(input + [0x2E], signature: signature))
    }
}

private let rsaPEM = """
    -----BEGIN PRIVATE KEY-----
    MIICdgIBADANBgkqhkiG9w0BAQEFAASCAmAwggJcAgEAAoGBAMX3+F0Lq5nmgu1M
    Dqaqj7nyDbH8ZngMi9JYB4JCj55E0z8fPZeX4u+aYAI2a1pFq4c+jTtoW/poxaWl
    XMke5t5o1QcIjiNMc1q9oEq5Eo7pI/kAeHsg4GuodpZZf2W35T32AXb4FJCdK5qx
    yKJ/18OX4oDXwL9ymvsjCHszq8TTAgMBAAECgYAixkQiVAJ4rj0hYdLRA/TrPNGb
    CjMVs158PGpVP0vrCTvyQpKXJl7+p6dlvBlvaf2PbDVy0goWGoFdb4a07XCwISWC
    WzRz+yasNbyK/nzapi8YUq4v/4bA86clvgiAavwXrEoKqzSCCqPe+AToQD5vfKid
    PIY72dH0eFrRqCbggQJBAP1ecXD9u96GrsiAHjvRvHQAg4e05eNKepptRrsxWtpI
    hAPkomITL/+7r+EjDM4CTXB0BO04DAZBkStd2Fr420sCQQDIBkAu/A1rjYI7Bi8X
    JCea0JcOO/Zs72pUe6un81jjBt/Uivl5BpkHVbrfgRvlRsppEy20BN4eTKSfnwcd
    4/+ZAkAjLFs/Plo4WCYne3G3CDTLPc8Epd5MIWjHy2fIUN+18d8x0ymfx94f+GRA
    MudyKeuqMtEERYWV0MBgbtS8PFPlAkEAra6PyLxfwsYLEMlb1lI0eX8pythSL2Ds
    CROhh6ILyoXLkThjSq1p7y6Hp07qM/l2BCr9AlU/sTuHrnpdqZyx8QJAJGIgFK8l
    SK8F3S4r2gjHSMQjOzB3SmBwBYzx1POvbZWvXVVCsyTfuiFSKgJGJVOTKEl8TIJk
    2t5jCqfzOwnZYQ==
    -----END PRIVATE KEY-----
    """

/// PKCS#1 v1.5 is deterministic: the signature `openssl dgst -sha256 -sign` made of the same
/// message with the same key.
@Test func rs256MatchesOpenSSLCommandLine() throws {
    let key = try #require(PrivateKey.pem(Array(rsaPEM.utf8)))
    #expect(key.kind == .rsa)
    #expect(
        Hex.encode(key.signRS256(Array("findmy.rs256".utf8)))
            == "3cc50236830e920c4e64ab5ad2a92491b1f4436cc6cbf87212086d6ce0fdf0ac38e072b9379591d53fe4818b645280d3"
            + "4fa8076864a1b05f24c771bbcc3ce8e01c5f0cedad2b4c8914f6ce35ea5cd3bc70fc69109c359d712df473d42bf78ea8da"
            + "3ef3018f75e0771acfc2d569cd375bb602d0acc52375e7158f6af7adfe6fbd")
}

@Test func pemKeysOfOtherKindsAreRefused() {
    #expect(PrivateKey.pem(Array("not a key".utf8)) == nil)
    #expect(PrivateKey.pem([]) == nil)
    let generated = PrivateKey.generateP256()
    let reloaded = PrivateKey.pem(generated.pemText())
    #expect(reloaded?.kind == .p256)
    #expect(reloaded?.publicPoint == generated.publicPoint)
}

private func temporaryDirectory() -> String {
    var template = Array("/tmp/findmy-keyfile-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
}

private func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) {
    let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
    precondition(descriptor >= 0)
    _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    fchmod(descriptor, mode)
    close(descriptor)
}

@Test func keyFilesMustBeTheOwnersAlone() throws {
    let directory = temporaryDirectory()
    defer { _ = system("rm -rf '\(directory)'") }
    let path = directory + "/AuthKey_TEST.p8"
    let pem = PrivateKey.generateP256().pemText()
    for mode: mode_t in [0o644, 0o640, 0o604, 0o620, 0o602] {
        writeFile(path, pem, mode: mode)
        #expect(throws: KeyFileError.tooOpen(path: path, mode: UInt32(0o100000 | mode))) {
            try KeyFile.readPrivate(path)
        }
        let message = String(describing: KeyFileError.tooOpen(path: path, mode: UInt32(mode)))
        #expect(message.contains("chmod 600") && !message.contains("PRIVATE"))
    }
    writeFile(path, pem, mode: 0o600)
    #expect(try KeyFile.readPrivate(path) == pem)
    writeFile(path, pem, mode: 0o400)
    #expect(try KeyFile.readPrivate(path) == pem)
    #expect(throws: KeyFileError.unreadable(path: directory + "/missing", errno: ENOENT)) {
        try KeyFile.readPrivate(directory + "/missing")
    }
}

@Test func theVAPIDKeyIsMadeOnceWithMode0600() throws {
    let directory = temporaryDirectory()
    defer { _ = system("rm -rf '\(directory)'") }
    let path = directory + "/vapid.pem"
    let previous = umask(0)
    defer { umask(previous) }
    let first = try KeyFile.loadOrCreateP256(path)
    var status = stat()
    #expect(stat(path, &status) == 0)
    #expect(status.st_mode & 0o777 == 0o600)
    let second = try KeyFile.loadOrCreateP256(path)
    #expect(first.publicPoint == second.publicPoint)
    chmod(path, 0o644)
    #expect(throws: KeyFileError.tooOpen(path: path, mode: UInt32(0o100644))) {
        try KeyFile.loadOrCreateP256(path)
    }
}
