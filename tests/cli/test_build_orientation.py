#!/usr/bin/python3
"""`dscache build` of JPEGs carrying each of the 8 EXIF orientations: every stored sample equals
OpenCV's own read of the file (cv2.imread applies the orientation; IMREAD_REDUCED_* at the DCT
reduction the build documents) followed by the same INTER_AREA resize, byte for byte, in colour
and grey, with and without the reduced decode. (That libcache's decoder rather than imdecode did
the decoding is asserted by tests/test_decode_orientation.cpp, which sees DecodeResult.)"""

import struct
import sys

import cv2
from cli_helpers import build, check_cache, check_eq, check_pixels_equal, encode, main, \
    smooth_rgb, write_bytes


def exif_app1(orientation, big_endian):
    """An APP1 Exif segment whose IFD0 holds one Orientation (SHORT) entry."""
    e = ">" if big_endian else "<"
    tiff = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8)
    tiff += struct.pack(e + "H", 1) + struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0)
    tiff += struct.pack(e + "I", 0)
    payload = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def case_build_exif_orientation(tmp):
    src = tmp / "src"
    paths = []
    for o in range(1, 9):
        # 256 x 384 stored: at --size 32 the reduced decode takes 1/8 in either orientation.
        jpeg = encode(".jpg", smooth_rgb(40 + o, 256, 384))
        paths.append(write_bytes(src / "a" / f"o{o}.jpg",
                                 jpeg[:2] + exif_app1(o, o % 2 == 0) + jpeg[2:]))
    for channels in (3, 1):
        for reduced in (True, False):
            out = tmp / f"c{channels}-{'reduced' if reduced else 'full'}"
            opts = ["--size", "32", "--resize", "stretch", "--channels", str(channels)]
            build(src, out, *opts, *([] if reduced else ["--no-reduced-decode"]))
            _, images, _ = check_cache(out)
            check_eq(len(images), 8, f"{out.name}: samples")
            flags = {(3, True): cv2.IMREAD_REDUCED_COLOR_8, (3, False): cv2.IMREAD_COLOR,
                     (1, True): cv2.IMREAD_REDUCED_GRAYSCALE_8,
                     (1, False): cv2.IMREAD_GRAYSCALE}[(channels, reduced)]
            for o, path in enumerate(paths, 1):
                ref = cv2.imread(str(path), flags)
                swapped = o >= 5
                full = (384, 256) if swapped else (256, 384)
                div = 8 if reduced else 1
                check_eq(ref.shape[:2], (full[0] // div, full[1] // div),
                         f"orientation {o}: OpenCV's oriented decode")
                ref = cv2.resize(ref, (32, 32), interpolation=cv2.INTER_AREA)
                if channels == 3:
                    ref = cv2.cvtColor(ref, cv2.COLOR_BGR2RGB)
                got = images[o - 1].reshape(ref.shape)
                check_pixels_equal(got, ref, f"{out.name}, orientation {o}")


CASES = {"build_exif_orientation": case_build_exif_orientation}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
