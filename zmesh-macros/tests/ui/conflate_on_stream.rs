#[zmesh::service(channel = "pump")]
trait Pump {
    #[idempotent(conflate)]
    async fn ramp(&self, steps: zmesh::typed::Items<f64>, to: f64) -> f64;
}

fn main() {}
