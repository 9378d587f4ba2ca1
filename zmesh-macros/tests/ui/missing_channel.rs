#[zmesh_macros::service(version = 1)]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
}

fn main() {}
