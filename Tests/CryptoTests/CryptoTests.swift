import Crypto
import Testing

@Test func sha256KnownVectors() {
    #expect(Hex.encode(SHA256.hash([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    #expect(
        Hex.encode(SHA256.hash(Array("abc".utf8)))
            == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    #expect(
        Hex.encode(SHA256.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
            == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    #expect(
        Hex.encode(SHA256.hash([UInt8](repeating: 0x61, count: 1_000_000)))
            == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
}

@Test func constantTimeCompare() {
    #expect(constantTimeEqual([], []))
    #expect(constantTimeEqual([1, 2, 3], [1, 2, 3]))
    #expect(!constantTimeEqual([1, 2, 3], [1, 2, 4]))
    #expect(!constantTimeEqual([1, 2, 3], [1, 2]))
    #expect(constantTimeEqual("csrf-tök", "csrf-tök"))
    #expect(!constantTimeEqual("csrf-tök", "csrf-tok"))
    #expect(!constantTimeEqual("", "a"))
}

@Test func tokensAre256BitsOfURLSafeBase64() {
    let tokens = (0..<100).map { _ in Token.generate() }
    #expect(Set(tokens).count == tokens.count)
    for token in tokens {
        #expect(token.utf8.count == 43)
        #expect(
            token.utf8.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                    || byte == UInt8(ascii: "_")
            })
        #expect(Base64URL.decode(token)?.count == 32)
    }
    #expect(SecureRandom.bytes(count: 0).isEmpty)
    #expect(SecureRandom.bytes(count: 1 << 20).count == 1 << 20)
}

@Test func base64URLAndHexRoundTrip() {
    // RFC 4648 §10 vectors, unpadded.
    let vectors = [
        ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
        ("foobar", "Zm9vYmFy"),
    ]
    for (plain, encoded) in vectors {
        #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
    }
    #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
    #expect(Base64URL.decode("Zg==") == nil)
    #expect(Base64URL.decode("Zh") == nil)  // non-canonical trailing bits
    #expect(Base64URL.decode("Z") == nil)
    #expect(Base64URL.decode("Zm+v") == nil)
    #expect(Hex.decode("00ffAB") == [0x00, 0xFF, 0xAB])
    #expect(Hex.decode("0") == nil)
    #expect(Hex.decode("zz") == nil)
}

@Suite struct PasswordHashTests {
    @Test func hashVerifiesItsPasswordAndNothingElse() {
        let stored = PasswordHash.hash("correct horse battery staple")
        #expect(stored.hasPrefix("$argon2id$v=19$m=65536,t=2,p=1$"), "\(stored)")
        #expect(PasswordHash.verify("correct horse battery staple", against: stored))
        #expect(!PasswordHash.verify("correct horse battery stapler", against: stored))
        #expect(!PasswordHash.verify("", against: stored))
        // A fresh salt each time: the same password never gives the same string.
        #expect(PasswordHash.hash("correct horse battery staple") != stored)
        #expect(!PasswordHash.verify("x", against: "not a hash"))
        #expect(PasswordHash.verify("ünïcødé pässwörd", against: PasswordHash.hash("ünïcødé pässwörd")))
    }

    /// The decoy is a constant: a check against it must cost what a check against a hash made now
    /// costs, so it has today's parameters and a salt and hash of today's lengths.
    @Test func theDecoyHasTheParametersAndShapeOfAFreshHash() {
        let fresh = PasswordHash.hash("a password").split(separator: "$", omittingEmptySubsequences: false)
        let decoy = PasswordHash.decoy.split(separator: "$", omittingEmptySubsequences: false)
        #expect(decoy.count == fresh.count)
        #expect(decoy.prefix(4) == fresh.prefix(4), "\(PasswordHash.decoy)")
        #expect(decoy.suffix(2).map(\.count) == fresh.suffix(2).map(\.count))
        #expect(!PasswordHash.verify("", against: PasswordHash.decoy))
        #expect(!PasswordHash.verify("a password", against: PasswordHash.decoy))
    }
}

/// Several buffers hash as their concatenation, wherever they are split, empty parts included.
@Test func sha256OfPartsIsTheHashOfTheirConcatenation() {
    let message = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
    let expected = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    for first in 0...message.count {
        for second in first...message.count
        where second == first || second == message.count || second % 7 == 0 {
            let digest = message.withUnsafeBytes { all in
                SHA256.hash(concatenating: [
                    UnsafeRawBufferPointer(rebasing: all[..<first]),
                    UnsafeRawBufferPointer(rebasing: all[first..<second]),
                    UnsafeRawBufferPointer(rebasing: all[second...]),
                ])
            }
            #expect(Hex.encode(digest) == expected, "split at \(first) and \(second)")
        }
    }
    #expect(
        Hex.encode(SHA256.hash(concatenating: []))
            == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
}
