//! What the simulated shop sells and where: stores with their currency and UTC offset, and
//! SKUs with a Zipf-like popularity and a price per currency.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Currency {
    Jpy,
    Usd,
    Eur,
}

impl Currency {
    pub(super) fn code(self) -> &'static str {
        match self {
            Currency::Jpy => "JPY",
            Currency::Usd => "USD",
            Currency::Eur => "EUR",
        }
    }

    /// ISO 4217 minor-unit exponent.
    pub(super) fn decimals(self) -> u32 {
        match self {
            Currency::Jpy => 0,
            Currency::Usd | Currency::Eur => 2,
        }
    }
}

/// A city the shop has stores in. Offsets are fixed: any offset names the same instant, and
/// a mix of `+09:00`, `-05:00` and `+01:00` exercises the normaliser's offset handling.
#[derive(Debug)]
pub(super) struct City {
    pub(super) name: &'static str,
    pub(super) currency: Currency,
    pub(super) offset_min: i32,
    pub(super) address_city: &'static str,
    pub(super) country: &'static str,
    pub(super) locale: &'static str,
    pub(super) postcode_prefix: &'static str,
    pub(super) streets: &'static [&'static str],
}

pub(super) const CITIES: [City; 3] = [
    City {
        name: "tokyo",
        currency: Currency::Jpy,
        offset_min: 9 * 60,
        address_city: "Shibuya-ku, Tokyo",
        country: "JP",
        locale: "ja-JP",
        postcode_prefix: "150-00",
        streets: &["Jingumae", "Dogenzaka", "Ebisu-Minami", "Sendagaya", "Udagawacho"],
    },
    City {
        name: "nyc",
        currency: Currency::Usd,
        offset_min: -5 * 60,
        address_city: "New York, NY",
        country: "US",
        locale: "en-US",
        postcode_prefix: "100",
        streets: &["Broadway", "W 34th St", "Lexington Ave", "Bleecker St", "Amsterdam Ave"],
    },
    City {
        name: "paris",
        currency: Currency::Eur,
        offset_min: 60,
        address_city: "Paris",
        country: "FR",
        locale: "fr-FR",
        postcode_prefix: "750",
        streets: &["Rue de Rivoli", "Boulevard Haussmann", "Rue Oberkampf", "Avenue de l'Opera", "Rue du Bac"],
    },
];

#[derive(Debug)]
pub(super) struct Store {
    pub(super) name: String,
    pub(super) city: &'static City,
}

impl Store {
    pub(super) fn currency(&self) -> Currency {
        self.city.currency
    }
}

/// Stores round-robin over the cities: tokyo-01, nyc-01, paris-01, tokyo-02, ...
pub(super) fn stores(count: u32) -> Vec<Store> {
    (0..count as usize)
        .map(|i| {
            let city = &CITIES[i % CITIES.len()];
            Store { name: format!("{}-{:02}", city.name, i / CITIES.len() + 1), city }
        })
        .collect()
}

/// SKUs `SKU-1 ..= SKU-n`; `SKU-1` is the most popular (weight 1/rank).
#[derive(Debug)]
pub(super) struct Catalog {
    cdf: Vec<f64>,
    usd_minor: Vec<i64>,
}

impl Catalog {
    pub(super) fn new(skus: u32, rng: &mut ChaCha8Rng) -> Catalog {
        let mut cdf = Vec::with_capacity(skus as usize);
        let mut total = 0.0;
        for rank in 1..=skus {
            total += 1.0 / f64::from(rank);
            cdf.push(total);
        }
        const ENDINGS: [i64; 4] = [1, 51, 5, 0];
        let usd_minor = (0..skus)
            .map(|_| {
                let dollars: i64 = rng.gen_range(1..=250);
                dollars * 100 - ENDINGS[rng.gen_range(0..ENDINGS.len())]
            })
            .collect();
        Catalog { cdf, usd_minor }
    }

    pub(super) fn len(&self) -> u32 {
        self.usd_minor.len() as u32
    }

    /// A 0-based SKU index drawn by popularity.
    pub(super) fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        let total = self.cdf.last().copied().unwrap_or(0.0);
        let u = rng.gen::<f64>() * total;
        let idx = self.cdf.partition_point(|&c| c <= u);
        idx.min(self.cdf.len().saturating_sub(1)) as u32
    }

    /// Unit price of a 0-based SKU index in minor units of `currency`.
    pub(super) fn price_minor(&self, sku: u32, currency: Currency) -> i64 {
        let usd = self.usd_minor.get(sku as usize).copied().unwrap_or(100);
        match currency {
            Currency::Usd => usd,
            // 1 USD = 150 JPY, rounded down to 10 yen.
            Currency::Jpy => (usd * 3 / 2 / 10 * 10).max(10),
            // 1 USD = 0.92 EUR, priced to end in 9 cents.
            Currency::Eur => usd * 92 / 100 / 10 * 10 + 9,
        }
    }
}

/// Writes the SKU name of a 0-based index: `SKU-<index + 1>`.
pub(super) fn push_sku(buf: &mut Vec<u8>, sku: u32) {
    buf.extend_from_slice(b"SKU-");
    super::encode::push_u64(buf, u64::from(sku) + 1);
}

pub(super) fn sku_name(sku: u32) -> String {
    format!("SKU-{}", u64::from(sku) + 1)
}
