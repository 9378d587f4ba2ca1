#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn pressure() -> f64;
}

fn main() {}
