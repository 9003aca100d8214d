//! Several regional instances share one PostgreSQL: concurrent writes, racing partition creation.

use crate::support::store as store_support;

use chrono::{Duration, DurationRound, Utc};
use store_support::{bare_sample, target, PgTestDb};
use vigil::io::store::{self, SampleQuery};
use vigil::vocab::sample::Outcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regional_instances_write_concurrently_into_new_day_partitions() {
    let db = PgTestDb::create().await;
    let first = store::open(&db.url).await.expect("open");
    first.migrate().await.expect("migrate");

    // Days far ahead have no partition yet, so every instance races to create the same ones.
    let day0 = Utc::now().duration_trunc(Duration::days(1)).expect("midnight") + Duration::days(30);
    let regions = ["eu-west-1", "us-east-1", "ap-south-1", "sa-east-1"];
    let mut tasks = Vec::new();
    for region in regions {
        let url = db.url.clone();
        tasks.push(tokio::spawn(async move {
            let instance = store::open(&url).await.expect("open");
            instance.migrate().await.expect("concurrent migrate is safe");
            let t = target("openai", "gpt-4o-mini", None, region);
            let mut inserted = 0;
            for round in 0..5 {
                let batch: Vec<_> = (0..200)
                    .map(|i| bare_sample(t.clone(), day0 + Duration::days(round) + Duration::seconds(i), Outcome::Ok))
                    .collect();
                inserted += instance.insert_samples(&batch).await.expect("insert");
            }
            inserted
        }));
    }
    for task in tasks {
        assert_eq!(task.await.expect("instance task"), 1_000);
    }
    for region in regions {
        let q = SampleQuery { region: Some(region.into()), ..Default::default() };
        assert_eq!(first.count_samples(&q).await.expect("count"), 1_000, "{region}");
    }
}
