import Testing

@testable import Clients

/// The direct decoder finds a wanted member of `properties` by its length first: every name must
/// be found by its own bytes, and a name one byte longer or shorter by none.
@Suite struct FeatureMembersTests {
    @Test func everyPropertyIsFoundByItsName() {
        for property in FeatureMembers.Property.allCases {
            let name = Array(property.name.description.utf8)
            name.withUnsafeBufferPointer {
                #expect(FeatureMembers.Property(named: $0) == property, "\(name)")
            }
            (name + [UInt8(ascii: "x")]).withUnsafeBufferPointer {
                #expect(FeatureMembers.Property(named: $0) == nil)
            }
            name.dropLast().withUnsafeBufferPointer { #expect(FeatureMembers.Property(named: $0) == nil) }
        }
    }
}

/// The direct decoder's reader knows a location's names by their length and one byte, then a
/// comparison of whole words: each name must be found by its own bytes, and neither a name one
/// byte longer or shorter nor one with any single byte changed may be taken for it.
@Suite struct LocationNameTests {
    @Test func everyNameIsFoundByItsOwnBytesOnly() {
        for name in LocationName.allCases {
            let bytes = Array(name.name.description.utf8)
            bytes.withUnsafeBufferPointer { #expect(LocationName($0) == name, "\(name)") }
            (bytes + [UInt8(ascii: "x")]).withUnsafeBufferPointer { #expect(LocationName($0) == nil) }
            bytes.dropLast().withUnsafeBufferPointer { #expect(LocationName($0) == nil) }
            for index in bytes.indices {
                var changed = bytes
                changed[index] ^= 0x01
                changed.withUnsafeBufferPointer {
                    let found = LocationName($0)
                    #expect(found == nil || found != name, "\(name) with byte \(index) changed")
                }
            }
        }
    }

    @Test func thePropertiesAreTheirOwnNames() {
        for property in FeatureMembers.Property.allCases {
            #expect(LocationName(rawValue: property.rawValue)?.property == property)
            #expect(LocationName(rawValue: property.rawValue)?.name.description == property.name.description)
        }
    }
}

/// The word-at-a-time search for the end of a plain run finds the same byte as a byte loop.
@Suite struct PlainRunTests {
    @Test func theWordSearchFindsTheFirstByteThatEndsAPlainRun() {
        var state: UInt64 = 7
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        let specials: [UInt8] = [
            0x22, 0x5C, 0x00, 0x1F, 0x09, 0x80, 0xC3, 0xFF, 0x7F, 0x20, 0x21, 0x5B, 0x5D,
        ]
        for _ in 0..<20_000 {
            let length = Int(next() % 40)
            let bytes = (0..<length).map { _ -> UInt8 in
                next() % 6 == 0 ? specials[Int(next() % UInt64(specials.count))] : UInt8(0x23 + next() % 0x39)
            }
            let from = length == 0 ? 0 : Int(next() % UInt64(length))
            let expected =
                bytes[from...].firstIndex { $0 == 0x22 || $0 == 0x5C || $0 < 0x20 || $0 >= 0x80 } ?? length
            bytes.withUnsafeBufferPointer { buffer in
                let reader = LocationReader(buffer, at: 0)
                let found = reader.plainRunEnd(from: from)
                // Past the words it stops where fewer than eight bytes remain; the caller's byte
                // loop goes on from there.
                #expect(
                    found == expected || (found < expected && length - found < 8), "\(bytes) from \(from)")
            }
        }
    }
}
