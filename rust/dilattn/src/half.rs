//! f16 and bf16 elements without external crates: u16 bit patterns in repr(transparent)
//! newtypes, so a `&[F16]` is the memory the library reads as DILATTN_F16 (SPEC 1).
//!
//! from_f32 rounds to nearest, ties to even (as a GPU's __float2half_rn and
//! __float2bfloat16_rn do); infinities stay, NaN stays NaN (quiet), an f16 overflow becomes
//! infinity. to_f32 is exact. tests/half.rs checks every rounding boundary of both types.

/// IEEE 754 binary16: 1 sign, 5 exponent, 10 fraction bits.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

/// bfloat16: the upper half of an f32 (1 sign, 8 exponent, 7 fraction bits).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

/// `value >> shift` rounded to nearest, ties to even (shift in 1..=31).
fn shift_round_even(value: u32, shift: u32) -> u32 {
    let kept = value >> shift;
    let rest = value & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    kept + u32::from(rest > half || (rest == half && kept & 1 == 1))
}

impl F16 {
    pub fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exponent = ((bits >> 23) & 0xff) as i32;
        let fraction = bits & 0x7f_ffff;
        if exponent == 0xff {
            let nan = if fraction != 0 { 0x200 } else { 0 };
            return F16(sign | 0x7c00 | nan);
        }
        let e = exponent - 127 + 15; // the f16 biased exponent
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            // An f16 subnormal, in units of 2^-24: the 24-bit significand times 2^(e - 14).
            if e < -10 {
                return F16(sign); // below 2^-25: rounds to zero
            }
            let significand = fraction | 0x80_0000;
            return F16(sign | shift_round_even(significand, (14 - e) as u32) as u16);
        }
        // Exponent and fraction at f32's scale, rounded to f16's 10 fraction bits; a carry out
        // of the fraction goes into the exponent, and a carry to 0x7c00 is infinity.
        let magnitude = (e as u32) << 23 | fraction;
        F16(sign | shift_round_even(magnitude, 13) as u16)
    }

    pub fn to_f32(self) -> f32 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let exponent = (h >> 10) & 0x1f;
        let fraction = h & 0x3ff;
        let magnitude = match exponent {
            0 => {
                let value = fraction as f32 * f32::from_bits(0x3380_0000); // fraction * 2^-24
                return if sign != 0 { -value } else { value };
            }
            0x1f => 0x7f80_0000 | fraction << 13,
            _ => (exponent + 127 - 15) << 23 | fraction << 13,
        };
        f32::from_bits(sign | magnitude)
    }
}

impl Bf16 {
    pub fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16((bits >> 16) as u16 | 0x40);
        }
        Bf16(shift_round_even(bits, 16) as u16)
    }

    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

impl From<F16> for f32 {
    fn from(x: F16) -> f32 {
        x.to_f32()
    }
}

impl From<F16> for f64 {
    fn from(x: F16) -> f64 {
        x.to_f32().into()
    }
}

impl From<Bf16> for f32 {
    fn from(x: Bf16) -> f32 {
        x.to_f32()
    }
}

impl From<Bf16> for f64 {
    fn from(x: Bf16) -> f64 {
        x.to_f32().into()
    }
}
